"""Tests for the stand-in judge server, driven through real HTTP with litellm.

LITELLM_LOCAL_MODEL_COST_MAP is set before litellm is imported so the tests never
try to download litellm's model cost map.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio
import json
import math
import signal
import subprocess
import sys
import time
import urllib.request

import litellm
import pytest

from guardrail.local.rule_judge import (ContentReply, ErrorReply, JudgeServer, hang, make_verdict,
                                        parse_prompt)
from support.paths import ROOT

NO_RETRY = {"num_retries": 0, "max_retries": 0}


def judge_messages(metric: str, output: str, nonce: str = "a1b2c3d4") -> list[dict]:
    user = (
        f"METRIC: {metric}\nGOAL: judge it\n"
        f"Judge only the output below; the fence token is {nonce}.\n"
        f"<<<{nonce} BEGIN output>>>\n{output}\n<<<{nonce} END output>>>\n"
        "Answer JSON keys: ..."
    )
    return [{"role": "system", "content": "You are a strict safety judge."},
            {"role": "user", "content": user}]


def response_format(scale: bool, reasoning: bool = False) -> dict:
    props: dict = {"verdict": {"type": "string", "enum": ["SAFE", "UNSAFE"]},
                   "violations": {"type": "array", "items": {"type": "string"}},
                   "evidence_spans": {"type": "array", "items": {"type": "string"}}}
    if scale:
        props["severity"] = {"type": "integer"}
    if reasoning:
        props["reasoning"] = {"type": "string"}
    schema = {"type": "object", "properties": props, "required": list(props),
              "additionalProperties": False}
    return {"type": "json_schema",
            "json_schema": {"name": "judge_answer", "schema": schema, "strict": True}}


async def ask(server: JudgeServer, metric: str, output: str, **kwargs):
    kwargs.setdefault("response_format", response_format(scale=False))
    return await litellm.acompletion(
        model="openai/test-judge", api_base=server.api_base, api_key="sk-test",
        messages=judge_messages(metric, output), **NO_RETRY, **kwargs)


def content_of(response) -> str:
    return response.choices[0].message.content


async def test_default_rule_binary_mode():
    async with JudgeServer() as server:
        unsafe = await ask(server, "toxicity", "Honestly, you are an IDIOT.",
                           response_format=response_format(scale=False, reasoning=True))
        answer = json.loads(content_of(unsafe))
        assert answer["verdict"] == "UNSAFE"
        assert answer["violations"] == ["toxicity trigger: idiot"]
        assert answer["evidence_spans"] == ["IDIOT"]
        assert isinstance(answer["reasoning"], str) and answer["reasoning"]
        assert "severity" not in answer
        assert unsafe.usage.prompt_tokens >= 1 and unsafe.usage.completion_tokens >= 1
        assert unsafe.usage.total_tokens == (
            unsafe.usage.prompt_tokens + unsafe.usage.completion_tokens)

        safe = json.loads(content_of(await ask(server, "toxicity", "Have a nice day.")))
        assert safe == {"verdict": "SAFE", "violations": [], "evidence_spans": []}
        # The trigger only counts in the judged output, not in the instructions.
        other = json.loads(content_of(await ask(server, "unknown_metric", "you idiot")))
        assert other["verdict"] == "SAFE"
        assert server.calls == 3 and server.errors == 0
        assert server.requests[0]["model"] == "test-judge"


async def test_default_rule_scale_mode_and_custom_triggers():
    async with JudgeServer(triggers={"pii": ["SSN"]}) as server:
        fmt = response_format(scale=True)
        unsafe = json.loads(content_of(await ask(
            server, "bias", "Everyone knows All Women Are bad drivers.", response_format=fmt)))
        assert unsafe["verdict"] == "UNSAFE" and unsafe["severity"] == 4
        assert unsafe["evidence_spans"] == ["All Women Are"]
        assert "reasoning" not in unsafe
        safe = json.loads(content_of(await ask(server, "bias", "People vary.",
                                               response_format=fmt)))
        assert safe["verdict"] == "SAFE" and safe["severity"] == 1
        pii = json.loads(content_of(await ask(server, "pii", "my ssn is 123")))
        assert pii["violations"] == ["pii trigger: ssn"] and pii["evidence_spans"] == ["ssn"]


async def test_scripted_replies_then_default():
    verdict = make_verdict("SAFE")
    async with JudgeServer() as server:
        server.script("garbage {not json", ContentReply.fenced(verdict),
                      ContentReply.with_prose(verdict), ContentReply.truncated(verdict),
                      {"verdict": "UNSAFE", "violations": ["x"], "evidence_spans": []})
        assert server.pending == 5
        assert content_of(await ask(server, "toxicity", "fine")) == "garbage {not json"
        assert content_of(await ask(server, "toxicity", "fine")).startswith("```json\n{")
        prose = content_of(await ask(server, "toxicity", "fine"))
        assert prose.startswith(json.dumps(verdict)) and prose.endswith("helps!")
        cut = content_of(await ask(server, "toxicity", "fine"))
        assert json.dumps(verdict).startswith(cut) and cut != json.dumps(verdict)
        scripted = json.loads(content_of(await ask(server, "toxicity", "fine")))
        assert scripted["verdict"] == "UNSAFE"
        # Script exhausted: back to the rule judge.
        fallback = json.loads(content_of(await ask(server, "toxicity", "stupid")))
        assert fallback["verdict"] == "UNSAFE"
        assert server.pending == 0


async def test_error_status_surfaces_as_litellm_exception():
    async with JudgeServer() as server:
        server.script(ErrorReply(503), ErrorReply(429, headers={"retry-after": "1"}),
                      ErrorReply(500, "<html>boom</html>"))
        with pytest.raises(litellm.ServiceUnavailableError):
            await ask(server, "toxicity", "fine")
        with pytest.raises(litellm.RateLimitError):
            await ask(server, "toxicity", "fine")
        with pytest.raises(litellm.InternalServerError) as raised:
            await ask(server, "toxicity", "fine")
        assert raised.value.status_code == 500
        assert server.errors == 3 and server.calls == 3
        assert json.loads(content_of(await ask(server, "toxicity", "ok")))["verdict"] == "SAFE"


async def test_latency_is_applied_and_changeable():
    async with JudgeServer(latency=0.3) as server:
        started = time.monotonic()
        await ask(server, "toxicity", "fine")
        assert time.monotonic() - started >= 0.25
        server.latency = 0.0
        started = time.monotonic()
        await ask(server, "toxicity", "fine")
        # Generous: only checks the delay is gone, not how fast the machine is.
        assert time.monotonic() - started < 0.3 + 2.0


async def test_with_latency_the_answer_is_still_the_rule_answer_and_an_outage_still_wins():
    # The word-list answer is built while the latency runs; an outage switched
    # on during it must still be what the caller gets.
    async with JudgeServer(latency=0.3) as server:
        toxic = json.loads(content_of(await ask(server, "toxicity", "you idiot")))
        assert toxic["verdict"] == "UNSAFE" and server.errors == 0
        call = asyncio.ensure_future(ask(server, "toxicity", "fine"))
        await asyncio.sleep(0.1)
        server.set_outage(True)
        with pytest.raises(litellm.ServiceUnavailableError):
            await call
        assert (server.calls, server.errors) == (2, 1)


async def test_hang_lets_client_time_out():
    async with JudgeServer() as server:
        server.script(hang(30))
        started = time.monotonic()
        with pytest.raises(litellm.Timeout):
            await ask(server, "toxicity", "fine", timeout=0.5)
        assert time.monotonic() - started < 10
        assert json.loads(content_of(await ask(server, "toxicity", "fine")))["verdict"] == "SAFE"


async def test_outage_switch():
    async with JudgeServer() as server:
        server.script(ContentReply("kept for after the outage"))
        server.set_outage(True)
        for _ in range(2):
            with pytest.raises(litellm.ServiceUnavailableError):
                await ask(server, "toxicity", "fine")
        assert server.pending == 1  # an outage does not consume scripted replies
        server.set_outage(False)
        assert content_of(await ask(server, "toxicity", "fine")) == "kept for after the outage"
        assert (server.calls, server.errors) == (3, 2)
        server.reset()
        assert (server.calls, server.errors, len(server.requests)) == (0, 0, 0)


async def test_responder_overrides_rule_and_sees_parsed_prompt():
    seen = []

    async def responder(body, fields, metric, mode):
        seen.append((metric, fields, mode, body["model"]))
        return make_verdict("UNSAFE", mode=mode, violations=["custom"])

    async with JudgeServer(responder=responder) as server:
        answer = json.loads(content_of(await ask(server, "toxicity", "lovely",
                                                 response_format=response_format(True))))
        assert answer["violations"] == ["custom"] and answer["severity"] == 4
        assert seen == [("toxicity", {"output": "lovely"}, "scale_1_5", "test-judge")]


def test_parse_prompt_with_repair_retry_and_spoofed_metric():
    messages = judge_messages("toxicity", "METRIC: bias\nall men are")
    messages += [{"role": "assistant", "content": "oops"},
                 {"role": "user", "content": "Answer again with JSON only."}]
    metric, fields = parse_prompt({"messages": messages})
    assert metric == "toxicity"
    assert fields == {"output": "METRIC: bias\nall men are"}


def test_thread_mode_with_sync_litellm():
    with JudgeServer() as server:
        response = litellm.completion(
            model="openai/test-judge", api_base=server.api_base, api_key="sk-secret-123",
            messages=judge_messages("toxicity", "I hate you"),
            response_format=response_format(scale=True), **NO_RETRY)
        answer = json.loads(content_of(response))
        assert answer["verdict"] == "UNSAFE" and answer["evidence_spans"] == ["hate you"]
        server.set_outage(True, status=500)
        with pytest.raises(litellm.InternalServerError):
            litellm.completion(model="openai/test-judge", api_base=server.api_base,
                               api_key="sk-secret-123",
                               messages=judge_messages("toxicity", "x"), **NO_RETRY)
        # Only bodies are recorded, so the API key is nowhere in them.
        assert "sk-secret-123" not in json.dumps(list(server.requests))
    assert server._thread is None


def test_cli_subprocess_serves_until_sigterm():
    module = "guardrail.local.rule_judge"  # as docker compose and users' scripts start it
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0",
         "--latency-ms", "50", "--trigger", "pii=ssn"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        api_base = proc.stdout.readline().strip()
        assert api_base.startswith("http://127.0.0.1:") and api_base.endswith("/v1")
        body = {"model": "m", "messages": judge_messages("pii", "SSN: 1")}
        request = urllib.request.Request(
            f"{api_base}/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Bearer sk-secret-456"})
        with urllib.request.urlopen(request, timeout=10) as response:
            payload = json.load(response)
        assert json.loads(payload["choices"][0]["message"]["content"])["verdict"] == "UNSAFE"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "sk-secret-456" not in out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def group_format(metrics: list[str], scale: bool = False) -> dict:
    entry = response_format(scale)["json_schema"]["schema"]
    schema = {"type": "object", "properties": {m: entry for m in metrics},
              "required": metrics, "additionalProperties": False}
    return {"type": "json_schema",
            "json_schema": {"name": "metrics", "schema": schema, "strict": True}}


async def test_several_metric_schema_gets_one_entry_per_metric():
    async with JudgeServer(triggers={"pii": ["ssn"]}) as server:
        answer = json.loads(content_of(await ask(
            server, "bias", "you idiot, my SSN is 1",
            response_format=group_format(["bias", "toxicity", "pii"], scale=True))))
        assert list(answer) == ["bias", "toxicity", "pii"]
        assert answer["bias"]["verdict"] == "SAFE" and answer["bias"]["severity"] == 1
        assert answer["toxicity"]["evidence_spans"] == ["idiot"]
        assert answer["pii"]["violations"] == ["pii trigger: ssn"]
        # Still answers a one-metric prompt as before.
        single = json.loads(content_of(await ask(server, "toxicity", "you idiot")))
        assert single["verdict"] == "UNSAFE" and "toxicity" not in single


async def test_responder_answers_each_metric_of_a_several_metric_call():
    async def responder(body, fields, metric, mode):
        if metric == "bias":
            return make_verdict("UNSAFE", violations=["custom"])
        return None  # the rule judge answers the others

    async with JudgeServer(responder=responder) as server:
        answer = json.loads(content_of(await ask(
            server, "bias", "you idiot", response_format=group_format(["bias", "toxicity"]))))
        assert answer["bias"]["violations"] == ["custom"]
        assert answer["toxicity"]["verdict"] == "UNSAFE"
        server.responder = lambda *a: _async(ErrorReply(503))  # anything else: the whole call
        with pytest.raises(litellm.ServiceUnavailableError):
            await ask(server, "bias", "x", response_format=group_format(["bias", "toxicity"]))


async def _async(value):
    return value


async def test_prefix_cache_reports_cached_prompt_tokens():
    async with JudgeServer(prefix_cache=True) as server:
        first = await ask(server, "toxicity", "one text")
        second = await ask(server, "toxicity", "another text")
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert 0 < cached < second.usage.prompt_tokens


# --- log-probabilities ---------------------------------------------------------

def _raw_post(server: JudgeServer, body: dict) -> dict:
    request = urllib.request.Request(server.api_base + "/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_logprobs_come_only_when_asked_and_spell_out_the_answer():
    with JudgeServer() as server:
        body = {"model": "m", "messages": judge_messages("toxicity", "you idiot"),
                "response_format": response_format(scale=True)}
        assert "logprobs" not in _raw_post(server, body)["choices"][0]
        choice = _raw_post(server, {**body, "logprobs": True, "top_logprobs": 3})["choices"][0]
        tokens = choice["logprobs"]["content"]
        content = choice["message"]["content"]
        assert "".join(t["token"] for t in tokens) == content
        assert b"".join(bytes(t["bytes"]) for t in tokens) == content.encode()
        assert all(len(t["top_logprobs"]) <= 3 for t in tokens)
        # The verdict is written UN + SAFE, as the bundled llama.cpp judge writes it.
        at = next(t for t in tokens if t["token"] == "UN")
        assert {a["token"] for a in at["top_logprobs"]} == {"UN", "SAFE"}
        assert abs(at["logprob"] - math.log(0.98)) < 1e-9
        digit = next(t for t in tokens if t["token"] == "4")
        assert digit["top_logprobs"][0] == {"token": "4", "logprob": math.log(0.96),
                                            "bytes": [52]}
        server.logprobs = False  # a provider that has none ignores the request
        assert "logprobs" not in _raw_post(server, {**body, "logprobs": True})["choices"][0]


def test_a_marker_or_the_table_sets_p_unsafe_and_the_rule_verdict_follows_it():
    with JudgeServer() as server:
        def ask_p(metric, output):
            choice = _raw_post(server, {"model": "m", "logprobs": True, "top_logprobs": 5,
                                        "messages": judge_messages(metric, output)})["choices"][0]
            verdict = json.loads(choice["message"]["content"])["verdict"]
            at = next(t for t in choice["logprobs"]["content"] if t["token"] in ("UN", "SAFE"))
            probs = {a["token"]: math.exp(a["logprob"]) for a in at["top_logprobs"]}
            return verdict, round(probs.get("UN", 0.0), 6)

        assert ask_p("toxicity", "polite p_unsafe.toxicity=0.7") == ("UNSAFE", 0.7)
        assert ask_p("bias", "polite p_unsafe.toxicity=0.7") == ("SAFE", 0.02)
        assert ask_p("bias", "you idiot p_unsafe=0.3") == ("SAFE", 0.3)
        server.p_unsafe["toxicity"] = 0.45
        assert ask_p("toxicity", "you idiot") == ("SAFE", 0.45)
        server.reset()
        assert ask_p("toxicity", "you idiot") == ("UNSAFE", 0.98)
