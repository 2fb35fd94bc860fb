"""The typed reader of judge answers says what the plain reader says, faster."""

import math

import orjson
import pytest

from guardrail.judges.answers import decode_completion
from guardrail.judging.probability import AnswerTokens, token_bytes, top_pairs
from guardrail.judges.transports import HTTPStatusError, completion_from_json

ANSWER = '{"verdict": "UNSAFE", "violations": ["insult"], "evidence_spans": ["idiot"]}'


def _token(text: str, logprob: float = 0.0, top=None, raw=None) -> dict:
    item = {"token": text, "logprob": logprob, "bytes": list(text.encode()) if raw is None else raw}
    item["top_logprobs"] = top if top is not None else [{"token": text, "logprob": logprob}]
    return item


def _body(content=ANSWER, tokens=None, usage=None, **extra) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    if tokens is not None:
        choice["logprobs"] = {"content": tokens}
    return {"choices": [choice], "usage": usage or {"prompt_tokens": 120, "completion_tokens": 30},
            **extra}


def _verdict_tokens() -> list[dict]:
    before, after = ANSWER.split("UNSAFE", 1)
    return [_token(before), _token("UN", -0.2, [{"token": "UN", "logprob": -0.2},
                                                {"token": "SAFE", "logprob": -1.7}]),
            _token("SAFE"), _token(after)]


BODIES = {
    "with log-probabilities": _body(tokens=_verdict_tokens()),
    "without log-probabilities": _body(),
    "cached prompt tokens (OpenAI)": _body(usage={"prompt_tokens": 100, "completion_tokens": 9,
                                                  "prompt_tokens_details": {"cached_tokens": 64}}),
    "cached prompt tokens (llama.cpp timings)": _body(timings={"cache_n": 50}),
    "no choices": {"choices": [], "usage": {"prompt_tokens": 3}},
    "no message": {"choices": [{"index": 0}]},
    "content null": _body(content=None),
    "a token that is not a string": _body(tokens=[{"token": 3, "logprob": 0.0}]),
    "a log-probability as an int": _body(tokens=[_token(ANSWER, 0)]),
    "a log-probability that is a bool": _body(tokens=[_token(ANSWER, True)]),
    "alternatives null": _body(tokens=[{**_token(ANSWER), "top_logprobs": None}]),
    "a character split over two tokens": _body(
        content='{"verdict": "SAFE", "note": "é"}',
        tokens=[_token('{"verdict": "SAFE", "note": "'), _token("", raw=[0xC3]),
                _token("", raw=[0xA9]), _token('"}')]),
    "usage that is not an object": {**_body(), "usage": "lots"},
    "no logprobs content": _body(tokens=[]),
}


def _same(fast, plain) -> None:
    assert (fast.content, fast.prompt_tokens, fast.completion_tokens, fast.cached_tokens) == \
        (plain.content, plain.prompt_tokens, plain.completion_tokens, plain.cached_tokens)
    assert (fast.logprobs is None) == (plain.logprobs is None)
    if plain.logprobs is None:
        return
    assert [(t.token, t.logprob, token_bytes(t), top_pairs(t.top)) for t in fast.logprobs] == \
        [(t.token, t.logprob, token_bytes(t), top_pairs(t.top)) for t in plain.logprobs]
    fast_answer, plain_answer = AnswerTokens(fast.logprobs), AnswerTokens(plain.logprobs)
    assert fast_answer.text == plain_answer.text
    assert fast_answer.reading("binary_yes_no") == plain_answer.reading("binary_yes_no")


@pytest.mark.parametrize("name", BODIES)
def test_the_typed_reader_yields_what_the_plain_reader_does(name):
    raw = orjson.dumps(BODIES[name])
    _same(decode_completion(200, raw), completion_from_json(orjson.loads(raw)))


def test_a_character_split_over_tokens_keeps_the_verdict_readable_on_the_typed_path():
    text = '{"note": "caf\u00e9", "verdict": "UNSAFE"}'
    raw = text.encode()
    cut, verdict = raw.index(b"\xc3"), raw.index(b"UNSAFE")
    tokens = [_token(raw[:cut].decode()), _token("", raw=[0xC3]), _token("", raw=[0xA9]),
              _token(raw[cut + 2:verdict].decode()),
              _token("UN", -0.2, [{"token": "UN", "logprob": -0.2},
                                  {"token": "SAFE", "logprob": -1.7}]),
              _token(raw[verdict + 2:].decode())]
    fast = decode_completion(200, orjson.dumps(_body(content=text, tokens=tokens)))
    answer = AnswerTokens(fast.logprobs)
    assert answer.text == text
    assert answer.reading("binary_yes_no").unsafe == pytest.approx(
        math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.7)))


def test_a_verdict_is_read_from_alternatives_left_undecoded():
    fast = decode_completion(200, orjson.dumps(BODIES["with log-probabilities"]))
    unsafe = AnswerTokens(fast.logprobs).reading("binary_yes_no").unsafe
    assert unsafe == pytest.approx(math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.7)))


@pytest.mark.parametrize("raw", [b"[1, 2]", b"not json at all", b"\xff\xfe", b'"text"', b""])
def test_a_body_that_is_not_a_json_object_is_an_error_naming_its_status(raw):
    with pytest.raises(HTTPStatusError) as caught:
        decode_completion(200, raw)
    assert caught.value.status_code == 200
    assert "not a JSON object" in str(caught.value)


def test_a_well_formed_answer_takes_the_typed_path(monkeypatch):
    import guardrail.judges.answers as answers

    def plain(data):
        raise AssertionError("the plain reader was used")
    monkeypatch.setattr(answers, "completion_from_json", plain)
    fast = decode_completion(200, orjson.dumps(BODIES["with log-probabilities"]))
    assert fast.content == ANSWER and len(fast.logprobs) == 4
