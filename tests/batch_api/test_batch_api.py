"""``run --batch-api`` against the stand-in batch server (tests/support/batch_server.py):
the same results as a synchronous run, chunks under the limits, a stopped run
resumed without paying twice, per-request failures, expired and failed batches,
and the batch price."""

import asyncio
import json

import orjson
import pytest

from guardrail.batch.run import run_batch
from guardrail.batch.batch_api import STATE_FILE, batch_prices, run_batch_api
from guardrail.batch_api.state import BatchState
from guardrail.errors import ConfigError, JudgeConfigError
from guardrail.config.settings import load_settings
from tests.support.batch_cases import TEXTS, batch_cases, result_files, run_cli
from tests.support.batch_server import BatchServer

KEY = "sk-test-secret-0123456789"
_cases, _files, _cli = batch_cases, result_files, run_cli


def _batch_settings(server, **extra):
    values = {"judge_model": "openai/test-judge", "judge_api_base": server.api_base,
              "judge_api_key": KEY, "batch_max_requests": 5, "batch_gather_seconds": 0.05,
              "batch_poll_seconds": 0.01, "batch_poll_max_seconds": 0.04}
    values.update(extra)
    return load_settings(environ={}, **values)


@pytest.fixture
async def batch_server():
    async with BatchServer() as server:
        yield server


async def _batch_run(cases, settings, folder, **kwargs):
    return await run_batch_api(cases, settings=settings, output_dir=folder, **kwargs)


@pytest.mark.parametrize("calls", ["per_message", "per_metric"])
async def test_results_are_field_for_field_those_of_the_synchronous_run(
        tmp_path, batch_server, make_settings, calls):
    sync_dir, batch_dir = tmp_path / "sync", tmp_path / "batch"
    await run_batch(_cases(), settings=make_settings(judge_calls=calls), output_dir=sync_dir)
    summary, stats = await _batch_run(_cases(), _batch_settings(batch_server, judge_calls=calls),
                                      batch_dir)
    assert _files(batch_dir) == _files(sync_dir)
    assert summary.judged == len(TEXTS) and summary.unsafe > 0  # the rules found some
    requests = len(TEXTS) * (1 if calls == "per_message" else 2)
    assert stats.requests == requests == sum(batch_server.created_sizes)
    assert max(batch_server.created_sizes) <= 5 and stats.submitted == batch_server.creates


async def test_chunks_stay_under_the_byte_limit(tmp_path, batch_server):
    settings = _batch_settings(batch_server, batch_max_requests=1000, batch_max_bytes=12_000)
    summary, stats = await _batch_run(_cases(), settings, tmp_path)
    sizes = [len(batch_server.files[b["input_file_id"]]) for b in batch_server.batches.values()]
    assert len(sizes) > 1 and max(sizes) <= 12_000
    assert summary.judged == len(TEXTS) and sum(batch_server.created_sizes) == len(TEXTS)


async def test_a_stopped_run_resumes_its_batches_and_pays_nothing_twice(tmp_path, batch_server):
    settings = _batch_settings(batch_server)
    batch_server.hold = True  # submitted batches stay in_progress
    task = asyncio.create_task(_batch_run(_cases(), settings, tmp_path))
    while batch_server.creates < 3 or batch_server.polls < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = orjson.loads((tmp_path / STATE_FILE).read_bytes())
    assert [len(c["custom_ids"]) for c in state["chunks"]] == [5, 5, 2]
    assert all(c["batch_id"] for c in state["chunks"]) and not _files(tmp_path)
    # As if stopped between creating chunk 0's batch and recording it.
    state["chunks"][0].update(batch_id=None, status="new")
    (tmp_path / STATE_FILE).write_bytes(orjson.dumps(state))
    batch_server.hold = False
    summary, stats = await _batch_run(_cases(), settings, tmp_path)
    assert (batch_server.creates, batch_server.uploads) == (3, 3)
    assert batch_server.downloads == 3  # each batch's output read once
    downloads = batch_server.downloads
    summary, stats = await _batch_run(_cases(), settings, tmp_path)  # all finished before
    assert batch_server.downloads - downloads == 3 and batch_server.creates == 3
    assert (stats.submitted, stats.resumed, stats.requests) == (0, 3, 12)
    assert summary.cases == summary.judged == len(TEXTS)
    assert sorted(_files(tmp_path)) == sorted([f"c{i}.json" for i in range(1, 13)]
                                              + ["summary.json"])
    chunks = orjson.loads((tmp_path / STATE_FILE).read_bytes())["chunks"]
    assert all(c["published"] and c["status"] == "completed" for c in chunks)


async def test_per_request_failures_are_those_cases_errors(tmp_path, batch_server):
    def when(text, then):
        return lambda cid, body: then if any(text in m["content"] for m in body["messages"]) \
            else None

    batch_server.error_for = when("tides", "server had an error")   # an error-file line
    batch_server.http_status_for = when("bread", 500)               # a non-200 response
    batch_server.content_for = when("the station", "not json at all")  # garbage, twice
    summary, _ = await _batch_run(_cases(), _batch_settings(batch_server), tmp_path)
    assert {e["case_id"] for e in summary.errors} == {"c1", "c3", "c8"}
    assert summary.judged == len(TEXTS) - 3 and summary.not_judged == 3
    for case, says in (("c1", "batch request failed: server_error: server had an error"),
                       ("c3", "batch request failed: HTTP 500: "),
                       ("c8", "after one repair retry")):
        report = orjson.loads((tmp_path / f"{case}.json").read_bytes())
        assert all(says in m["error"] and m["score"] is None and m["result"] == []
                   for m in report["metrics"]), report
    # The garbled answer was asked again, as the synchronous judge does: a later batch
    # (with or without other requests: on a loaded machine the last ones may join it).
    asked = [b["id"] for b in batch_server.batches.values()
             if b"the station" in batch_server.files[b["input_file_id"]]]
    assert len(asked) == 2 and sum(batch_server.created_sizes) == len(TEXTS) + 1


async def test_an_expired_batch_reports_the_unrun_requests_and_a_rerun_submits_them(
        tmp_path, batch_server):
    settings = _batch_settings(batch_server, batch_max_requests=100)
    batch_server.expire_next = 1
    summary, _ = await _batch_run(_cases(), settings, tmp_path)
    assert summary.judged == 6 and summary.not_judged == 6
    assert all("did not run this request (batch_expired" in e["error"] for e in summary.errors)
    summary, stats = await _batch_run(_cases(), settings, tmp_path)
    assert summary.judged == len(TEXTS) and stats.submitted == 1
    assert batch_server.created_sizes == [12, 6]  # only the unrun six, paid once


async def test_a_failed_batch_leaves_every_request_not_judged(tmp_path, batch_server):
    batch_server.fail_next = 1
    summary, _ = await _batch_run(_cases(TEXTS[:3]), _batch_settings(batch_server), tmp_path)
    assert summary.judged == 0 and summary.cases == 3
    assert {e["error"] for e in summary.errors} == {
        "not judged: batch batch-2 ended failed without running this request; a new run "
        "with the same batch state file submits it again"}


async def test_a_provider_blip_while_polling_is_waited_out(tmp_path, batch_server):
    batch_server.fail_polls = 3
    said = []
    summary, _ = await _batch_run(_cases(), _batch_settings(batch_server), tmp_path,
                                  say=said.append)
    assert summary.judged == len(TEXTS) and batch_server.fail_polls == 0
    assert sum("failed (BatchHTTPError: HTTP 503" in line for line in said) == 3


async def test_a_cascade_is_refused_rather_than_run_with_batch_settings(tmp_path, batch_server):
    with pytest.raises(ConfigError, match="does not take a cascade"):
        await _batch_run(_cases(), _batch_settings(batch_server, escalate_model="openai/x"),
                         tmp_path)


async def test_an_endpoint_without_a_batch_api_is_a_configuration_error(tmp_path,
                                                                        judge_server):
    settings = load_settings(environ={}, judge_model="openai/test-judge", judge_api_key=KEY,
                             judge_api_base=judge_server.api_base, batch_gather_seconds=0.05)
    with pytest.raises(JudgeConfigError, match="has no batch API.*check judge_api_base"):
        await _batch_run(_cases(TEXTS[:2]), settings, tmp_path)
    assert judge_server.calls == 0


async def test_the_batch_run_costs_the_batch_price(tmp_path, batch_server, make_settings):
    prices = {"judge_input_cost_per_token": 1e-6, "judge_output_cost_per_token": 4e-6}
    sync = await run_batch(_cases(), settings=make_settings(**prices), output_dir=tmp_path / "s")
    batch, _ = await _batch_run(_cases(), _batch_settings(batch_server, **prices), tmp_path / "b")
    assert batch.cost.input_tokens == sync.cost.input_tokens > 0
    assert batch.cost.cost == pytest.approx(sync.cost.cost / 2)


async def test_a_request_asked_again_after_its_batch_finished_is_answered(tmp_path,
                                                                          batch_server):
    settings = _batch_settings(batch_server)
    first, _ = await _batch_run(_cases(TEXTS[:2]), settings, tmp_path)
    # The same cases again in one process, through a collector that saw the batch finish.
    from guardrail.batch_api.api import OpenAIBatches
    from guardrail.batch_api.client import BatchClient
    from guardrail.batch_api.collector import BatchCollector

    state = BatchState.open(tmp_path / STATE_FILE, api_base=batch_server.api_base,
                            model="openai/test-judge")
    api = OpenAIBatches(BatchClient(batch_server.api_base, api_key=KEY), completion_window="24h")
    collector = BatchCollector(api, state, settings=settings.batch_api)
    cid = state.chunks[0].custom_ids[0]
    try:
        once = await asyncio.wait_for(collector.request(cid, {}), 10)
        again = await asyncio.wait_for(collector.request(cid, {}), 10)
    finally:
        await collector.aclose()
    assert once == again and once["choices"] and first.judged == 2
    assert batch_server.creates == 1


def test_batch_prices_come_from_the_price_map():
    judge = load_settings(environ={}, judge_model="openai/gpt-4o-mini").judge
    assert batch_prices(judge, discount=0.5) == (7.5e-08, 3e-07)  # the map's *_batches
    unknown = load_settings(environ={}, judge_model="openai/no-such-model").judge
    assert batch_prices(unknown, discount=0.5) is None


def test_state_mismatch_is_refused(tmp_path):
    state = BatchState.open(tmp_path / "s.json", api_base="http://a/v1", model="m")
    state.add_chunk(["r1"])
    with pytest.raises(Exception, match="is for api_base"):
        BatchState.open(tmp_path / "s.json", api_base="http://b/v1", model="m")


def test_estimate_batch_api_prices_at_the_batch_price(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from guardrail.cli import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases.jsonl").write_text("\n".join(
        json.dumps({"case_id": f"c{i}", "output": t}) for i, t in enumerate(TEXTS)))
    base = ["estimate", "redteam", "--input", "cases.jsonl", "--json",
            "--model", "openai/gpt-4o-mini"]
    runner = CliRunner()
    normal, batch = runner.invoke(cli, base), runner.invoke(cli, [*base, "--batch-api"])
    assert normal.exit_code == batch.exit_code == 0, normal.output + batch.output
    normal, batch = json.loads(normal.stdout), json.loads(batch.stdout)
    assert set(batch) == set(normal)  # the contract's shape, unchanged
    assert batch["cost"]["input_tokens"] == normal["cost"]["input_tokens"]
    assert batch["cost"]["cost"] == pytest.approx(normal["cost"]["cost"] / 2)


def test_run_batch_api_command(tmp_path):
    (tmp_path / "cases.jsonl").write_text("\n".join(
        json.dumps({"case_id": f"c{i}", "output": t}) for i, t in enumerate(TEXTS[:4])))
    with BatchServer() as server:
        proc = _cli(["run", "redteam", "--input", "cases.jsonl", "--output-dir", "out",
                     "--batch-api", "--model", "openai/test-judge", "--api-base",
                     server.api_base, "--quiet"], tmp_path,
                    env={"GUARDRAIL_JUDGE_API_KEY": KEY, "GUARDRAIL_BATCH_POLL_SECONDS": "0.01",
                         "GUARDRAIL_BATCH_GATHER_SECONDS": "0.05"})
    assert proc.returncode == 0, proc.stderr
    assert "1 chunk(s) submitted, 0 resumed" in proc.stderr and server.creates == 1
    assert "cases: 4  judged: 4" in proc.stdout
    report = json.loads((tmp_path / "out/c0.json").read_text())
    assert set(report) == {"metrics", "cost"} and KEY not in proc.stdout + proc.stderr
