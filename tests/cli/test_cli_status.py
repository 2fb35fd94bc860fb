"""``guardrail status``: each worker's /health as one line, the stalled partitions
under it, exit 1 unless every worker is ok."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from guardrail._processes import free_port
from guardrail.cli import cli

STALLED = {"status": "stalled", "judge_paused": False, "rebalancing": False,
           "stalled_partitions": [{"topic": "model-outputs", "partition": 0, "lag": 412,
                                   "committed": 90311, "seconds_since_progress": 155.2}]}
PAUSED = {"status": "paused", "judge_paused": True, "rebalancing": False,
          "stalled_partitions": []}
OK = {"status": "ok", "judge_paused": False, "rebalancing": True, "stalled_partitions": []}


@pytest.fixture
def workers():
    """Three stand-in workers' /health pages; their addresses, by state."""
    servers = {}
    for name, body, code in (("stalled", STALLED, 200), ("paused", PAUSED, 503),
                             ("ok", OK, 200)):
        class Health(BaseHTTPRequestHandler):
            answer, status = json.dumps(body).encode(), code

            def do_GET(self):
                self.send_response(self.status if self.path == "/health" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(self.answer)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers[name] = server
    yield {name: f"127.0.0.1:{s.server_address[1]}" for name, s in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


def test_each_worker_gets_a_line_and_each_stalled_partition_one_under_it(workers):
    gone = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(cli, ["status", *(a for name in ("stalled", "paused", "ok")
                                                  for a in ("--worker", workers[name])),
                                      "--worker", gone, "--timeout", "2"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{workers['stalled']}  stalled  1 partition with lag and no progress"
    assert lines[1] == "  model-outputs[0]  lag 412  no progress for 2:35  committed offset 90311"
    assert lines[2] == (f"{workers['paused']}  paused  waiting out a judge outage "
                        "(nothing judged, nothing lost)")
    assert lines[3] == f"{workers['ok']}  ok  rebalancing"
    assert lines[4].startswith(f"{gone}  unreachable  ") and "refused" in lines[4]


def test_all_ok_exits_0_and_json_gives_the_answers_by_address(workers):
    result = CliRunner().invoke(cli, ["status", "--worker", workers["ok"], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {workers["ok"]: OK}


def test_without_a_worker_flag_the_settings_name_the_address(workers, monkeypatch):
    host, port = workers["stalled"].split(":")
    monkeypatch.setenv("GUARDRAIL_WEB_HOST", host)
    monkeypatch.setenv("GUARDRAIL_WEB_PORT", port)
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 1 and result.output.startswith(f"{host}:{port}  stalled")
