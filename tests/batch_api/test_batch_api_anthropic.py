"""``run --batch-api`` with an ``anthropic/`` judge, against the stand-in Anthropic API
(tests/support/anthropic_batch_server.py): Message Batches for the batch run,
``/v1/messages`` through litellm for the synchronous run it is compared with.

The same results and the same request bodies as the synchronous path (both
ways litellm writes the answer schema), results in any order with errored,
canceled, expired, missing and garbled lines, restarts that resume rather
than pay again, the provider's limits and the batch price."""

import asyncio
import json
import re

import orjson
import pytest

from guardrail.providers.litellm import litellm
from guardrail.batch.run import run_batch
from guardrail.batch_api.collector import request_id
from guardrail.batch.batch_api import STATE_FILE, batch_settings, run_batch_api
from guardrail.errors import JudgeConfigError
from guardrail.judging.prompts import FENCE_LINE
from guardrail.config.settings import load_settings
from tests.support.anthropic_batch_server import CUSTOM_ID, AnthropicBatchServer
from tests.support.batch_cases import TEXTS, batch_cases, result_files, run_cli

KEY = "sk-ant-test-0123456789"
#: litellm writes the answer schema as output_format (structured-outputs beta) for this one,
NATIVE = "anthropic/claude-haiku-4-5"
#: and as a forced json_tool_call tool for this one (not in the price map either).
TOOL = "anthropic/claude-3-haiku-20240307"
_FENCE = re.compile(re.escape(FENCE_LINE) + r"([0-9a-f]{8,64})")


@pytest.fixture
async def server():
    async with AnthropicBatchServer(key=KEY) as stand_in:
        yield stand_in
    assert stand_in.invalid == []  # every request was one Anthropic takes


def _settings(server, model=TOOL, **extra):
    # Gathering for 0.2 s: the tests count chunks, and on a loaded machine the
    # twelve requests may come further apart than the 0.05 s of the OpenAI tests.
    values = {"judge_model": model, "judge_api_base": server.api_base, "judge_api_key": KEY,
              "batch_max_requests": 5, "batch_gather_seconds": 0.2,
              "batch_poll_seconds": 0.01, "batch_poll_max_seconds": 0.04, **extra}
    return load_settings(environ={}, **values)


async def _batch_run(settings, folder, texts=TEXTS, **kwargs):
    return await run_batch_api(batch_cases(texts), settings=settings, output_dir=folder,
                               **kwargs)


def _without_cost(files):
    """The files with their prices removed (the batch price is half)."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cost"}
        return [strip(v) for v in value] if isinstance(value, list) else value
    return {name: strip(json.loads(raw)) for name, raw in files.items()}


def _unfenced(params):
    """A request without its fence token (drawn afresh for every call)."""
    text = json.dumps(params, sort_keys=True)
    token = _FENCE.search(text)
    return text.replace(token.group(1), "") if token else text


def _case_errors(folder, case):
    report = orjson.loads((folder / f"{case}.json").read_bytes())
    assert all(m["score"] is None and m["result"] == [] for m in report["metrics"]), report
    return {m["error"] for m in report["metrics"]}


@pytest.mark.parametrize(("model", "calls"), [(NATIVE, "per_message"), (TOOL, "per_message"),
                                              (TOOL, "per_metric")])
async def test_results_and_requests_are_those_of_the_synchronous_run(tmp_path, server, model,
                                                                     calls):
    litellm()  # imported before any call: on a loaded machine the import outlasts a timeout
    sync = load_settings(environ={}, judge_model=model, judge_api_base=server.api_base,
                         judge_api_key=KEY, judge_calls=calls, judge_max_retries=0,
                         judge_timeout=120)
    sync_summary = await run_batch(batch_cases(), settings=sync, output_dir=tmp_path / "sync")
    summary, stats = await _batch_run(_settings(server, model, judge_calls=calls),
                                      tmp_path / "batch")
    assert _without_cost(result_files(tmp_path / "batch")) == _without_cost(
        result_files(tmp_path / "sync"))
    assert summary.judged == sync_summary.judged == len(TEXTS) and summary.unsafe > 0
    # Each batch line's params are the body the synchronous call posted.
    assert sorted(_unfenced(p) for _, p in server.received) == sorted(
        _unfenced(b) for b in server.sync_bodies)
    assert stats.requests == len(server.received) == sum(server.created_sizes)
    params = server.received[0][1]
    assert "system" in params and params["max_tokens"] > 0 and "logprobs" not in params
    assert all(m["role"] in ("user", "assistant") for m in params["messages"])
    assert all(CUSTOM_ID.match(cid) for cid, _ in server.received)
    wants_beta = "output_format" in params
    assert wants_beta == (model == NATIVE) and ("tools" in params) == (model == TOOL)
    assert all(("structured-outputs" in beta) == wants_beta for beta in server.betas)


def test_a_request_id_is_a_valid_custom_id():
    assert CUSTOM_ID.match(request_id({"model": "m", "messages": []}))


async def test_results_in_any_order_each_request_its_own_outcome(tmp_path, server):
    outcomes = {"tides": "errored", "bread": "canceled", "station": "expired",
                "prime numbers": "missing", "the sea": "garbled"}

    def outcome(cid, params):
        text = json.dumps(params)
        return next((o for word, o in outcomes.items() if word in text), None)

    server.result_for = outcome
    server.content_for = lambda cid, body: "not json" if "Nothing to see" in json.dumps(
        body) else None
    settings = _settings(server, batch_max_requests=100)
    summary, _ = await _batch_run(settings, tmp_path)
    assert summary.judged == len(TEXTS) - 6
    assert _case_errors(tmp_path, "c1") == {
        "batch request failed: invalid_request_error: stand-in error"}
    again = "; a new run with the same batch state file submits it again"
    assert _case_errors(tmp_path, "c3") == {
        f"not judged: the batch did not run this request (canceled){again}"}
    assert _case_errors(tmp_path, "c8") == {
        f"not judged: the batch did not run this request (expired){again}"}
    assert _case_errors(tmp_path, "c7") == {
        "batch msgbatch_0001 ended without a result for this request"}
    (garbled,) = _case_errors(tmp_path, "c10")
    assert garbled.startswith("batch request failed: the answer is not a Messages response")
    (repaired,) = _case_errors(tmp_path, "c12")
    assert "after one repair retry" in repaired  # its repair went in a batch of its own
    assert server.created_sizes == [12, 1]
    server.result_for = lambda cid, params: None
    summary, stats = await _batch_run(settings, tmp_path)
    assert server.created_sizes == [12, 1, 2]  # only the canceled and the expired, again
    assert stats.submitted == 1 and summary.judged == len(TEXTS) - 4


async def test_an_expired_half_is_given_back_and_judged_by_a_rerun(tmp_path, server):
    settings = _settings(server, batch_max_requests=100)
    server.expire_next = 1
    summary, _ = await _batch_run(settings, tmp_path)
    assert summary.judged == 6 and summary.not_judged == 6
    summary, _ = await _batch_run(settings, tmp_path)
    assert summary.judged == len(TEXTS) and server.created_sizes == [12, 6]


async def _stop_when(task, ready):
    while not ready():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _state(folder):
    return orjson.loads((folder / STATE_FILE).read_bytes())


def _staged(folder):
    return sorted(p.name for p in (folder / (STATE_FILE + ".staged")).glob("*"))


async def test_a_stopped_run_resumes_polling_and_pays_nothing_twice(tmp_path, server):
    settings = _settings(server)
    server.hold = True
    task = asyncio.create_task(_batch_run(settings, tmp_path))
    await _stop_when(task, lambda: server.creates == 3 and server.polls >= 6)
    chunks = _state(tmp_path)["chunks"]
    assert [len(c["custom_ids"]) for c in chunks] == [5, 5, 2]
    assert all(c["batch_id"] and c["status"] == "in_progress" for c in chunks)
    assert _staged(tmp_path) == []  # a created batch's staged request is deleted
    server.hold = False
    summary, stats = await _batch_run(settings, tmp_path)
    assert (server.creates, stats.submitted, stats.resumed) == (3, 0, 3)
    assert summary.judged == len(TEXTS) and server.downloads == 3
    assert all(c["status"] == "ended" and c["published"] for c in _state(tmp_path)["chunks"])


async def test_a_run_stopped_before_recording_its_batch_finds_it(tmp_path, server):
    settings = _settings(server, batch_max_requests=100)
    server.stall_create = "after"  # created at the server; the answer never arrives
    said = []
    task = asyncio.create_task(_batch_run(settings, tmp_path))
    await _stop_when(task, lambda: server.creates == 1)
    server.release_create.set()
    (chunk,) = _state(tmp_path)["chunks"]
    assert chunk["batch_id"] is None and _staged(tmp_path) == [chunk["file_id"]]
    summary, stats = await _batch_run(settings, tmp_path, say=said.append)
    assert server.creates == 1 and summary.judged == len(TEXTS)  # adopted, not paid again
    assert any("found its batch msgbatch_0001" in line for line in said)
    assert _state(tmp_path)["chunks"][0]["batch_id"] == "msgbatch_0001"
    assert _staged(tmp_path) == [] and stats.submitted == 0


async def _stopped_before_creating(server, settings, folder):
    server.stall_create = "before"  # the create never reaches the server's books
    task = asyncio.create_task(_batch_run(settings, folder))
    await _stop_when(task, lambda: server.stall_create is None)  # the create is waiting
    server.release_create.set()
    assert server.creates == 0 and len(_staged(folder)) == 1


async def test_a_run_stopped_before_its_batch_was_created_creates_it_from_the_staged_file(
        tmp_path, server):
    settings = _settings(server, batch_max_requests=100)
    await _stopped_before_creating(server, settings, tmp_path)
    summary, stats = await _batch_run(settings, tmp_path)
    assert server.creates == 1 and server.created_sizes == [12]
    assert summary.judged == len(TEXTS) and stats.submitted == 0 and stats.resumed == 1
    assert _staged(tmp_path) == []


async def test_staged_requests_gone_without_a_batch_are_given_back(tmp_path, server):
    settings = _settings(server, batch_max_requests=100)
    await _stopped_before_creating(server, settings, tmp_path)
    for staged in (tmp_path / (STATE_FILE + ".staged")).glob("*"):
        staged.unlink()
    summary, _ = await _batch_run(settings, tmp_path)
    assert summary.judged == 0 and server.creates == 0
    assert all("staged requests" in e["error"] and "are gone; a new run with the same batch "
               "state file submits it again" in e["error"] for e in summary.errors)
    summary, stats = await _batch_run(settings, tmp_path)
    assert summary.judged == len(TEXTS) and server.created_sizes == [12]
    assert stats.submitted == 1  # given back: a chunk of its own


async def test_provider_faults_are_each_requests_error_or_waited_out(tmp_path, server):
    server.fail_polls = 2
    said = []
    summary, _ = await _batch_run(_settings(server), tmp_path / "blip", TEXTS[:3],
                                  say=said.append)
    assert summary.judged == 3 and sum("HTTP 503" in line for line in said) == 2
    server.garble_polls = 1
    summary, _ = await _batch_run(_settings(server), tmp_path / "garbled", TEXTS[:3])
    assert summary.judged == 0
    assert all("answer is not a message batch" in e["error"] for e in summary.errors)
    server.results_host = "http://elsewhere.invalid:1"
    summary, _ = await _batch_run(_settings(server), tmp_path / "foreign", TEXTS[:3])
    assert summary.judged == 0 and server.downloads == 1  # the blip run's only
    assert all("not on judge_api_base's host" in e["error"] for e in summary.errors)


async def test_a_refused_key_or_a_missing_endpoint_is_a_configuration_error(tmp_path, server,
                                                                            judge_server):
    with pytest.raises(JudgeConfigError, match="refused the key.*check judge_api_key"):
        await _batch_run(_settings(server, judge_api_key="sk-ant-wrong"), tmp_path / "k",
                         TEXTS[:2])
    with pytest.raises(JudgeConfigError, match="no Message Batches API.*check judge_api_base"):
        await _batch_run(_settings(server, judge_api_base=judge_server.api_base), tmp_path / "b",
                         TEXTS[:2])
    assert server.creates == 0


def test_anthropic_limits_apply_unless_set():
    def limits(**values):
        batch = batch_settings(load_settings(environ={}, **values)).batch_api
        return batch.max_requests, batch.max_bytes

    assert limits(judge_model=NATIVE) == (100_000, 250_000_000)
    assert limits(judge_model=NATIVE, batch_max_requests=7) == (7, 250_000_000)
    assert limits(judge_model="openai/gpt-4o-mini") == (50_000, 190_000_000)


def test_estimate_prices_an_anthropic_judge_at_the_batch_price(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from guardrail.cli import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases.jsonl").write_text("\n".join(
        json.dumps({"case_id": f"c{i}", "output": t}) for i, t in enumerate(TEXTS)))
    base = ["estimate", "redteam", "--input", "cases.jsonl", "--json", "--model", NATIVE]
    runner = CliRunner()
    normal, batch = runner.invoke(cli, base), runner.invoke(cli, [*base, "--batch-api"])
    assert normal.exit_code == batch.exit_code == 0, normal.output + batch.output
    assert "$5e-07 / $2.5e-06 per input / output token" in batch.stderr  # the map's *_batches
    normal, batch = json.loads(normal.stdout), json.loads(batch.stdout)
    assert batch["cost"]["input_tokens"] == normal["cost"]["input_tokens"] > 0
    assert batch["cost"]["cost"] == pytest.approx(normal["cost"]["cost"] / 2)


def test_run_batch_api_command_with_an_anthropic_judge(tmp_path):
    (tmp_path / "cases.jsonl").write_text("\n".join(
        json.dumps({"case_id": f"c{i}", "output": t}) for i, t in enumerate(TEXTS[:4])))
    with AnthropicBatchServer(key=KEY) as stand_in:
        proc = run_cli(["run", "redteam", "--input", "cases.jsonl", "--output-dir", "out",
                     "--batch-api", "--model", NATIVE, "--api-base", stand_in.api_base,
                     "--quiet"], tmp_path,
                    env={"GUARDRAIL_JUDGE_API_KEY": KEY, "GUARDRAIL_BATCH_POLL_SECONDS": "0.01",
                         "GUARDRAIL_BATCH_GATHER_SECONDS": "0.05"})
    assert proc.returncode == 0, proc.stderr
    assert "1 chunk(s) submitted, 0 resumed" in proc.stderr and stand_in.creates == 1
    assert "cases: 4  judged: 4" in proc.stdout and stand_in.invalid == []
    assert KEY not in proc.stdout + proc.stderr


def test_the_stand_in_refuses_what_anthropic_refuses():
    from tests.support.anthropic_batch_server import _batch_problem, _params_problems

    good = {"model": "claude", "max_tokens": 8, "system": [{"type": "text", "text": "rules"}],
            "messages": [{"role": "user", "content": "judge this"}]}
    assert _params_problems(good, "") == [] and _batch_problem(
        [{"custom_id": "r-1", "params": good}]) is None
    system_turn = {**good, "messages": [{"role": "system", "content": "rules"},
                                        *good["messages"]]}
    no_max = {k: v for k, v in good.items() if k != "max_tokens"}
    for bad in (system_turn, no_max, {**good, "response_format": {}},
                {**good, "output_format": {"type": "json_schema"}}):
        assert _params_problems(bad, ""), bad
    for ids in (["r 1"], ["x" * 65], ["r-1", "r-1"]):
        assert _batch_problem([{"custom_id": i, "params": good} for i in ids]), ids
