"""The ``openai`` input format, on records the real OpenAI client produces.

The first test logs a real call: the ``openai`` client against the stand-in
judge (it is OpenAI-compatible), the request body as the server received it
and the response as the client parsed it. The others build responses with the
client's own types (``openai.types.chat.ChatCompletion``), so the shapes are
the ones the SDK writes, ``None`` fields included.
"""

import orjson
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from guardrail.formats import UndecodableRecord
from guardrail.formats.openai import OpenAIDecoder
from guardrail.judging.models import Case

DECODER = OpenAIDecoder()
REQUEST = {"model": "gpt-4o", "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}]}


def _completion(*messages, finish="stop", **extra):
    """A chat.completion dump as the SDK writes it: one choice per message."""
    return ChatCompletion.model_validate({
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1718000000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": i, "finish_reason": finish, "logprobs": None,
                     "message": {"role": "assistant", **m}} for i, m in enumerate(messages)],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        **extra}).model_dump(mode="json")


def _decode(record):
    return DECODER.decode(orjson.dumps(record), {})


async def test_a_logged_call_of_the_real_client(judge_server):
    judge_server.script("Paris.")
    client = AsyncOpenAI(base_url=judge_server.api_base, api_key="sk-test", max_retries=0)
    try:
        response = await client.chat.completions.create(**REQUEST)
    finally:
        await client.close()
    record = {"request": judge_server.requests[-1], "response": response.model_dump(mode="json"),
              "metadata": {"model_version": "v7"}}
    decoded = _decode(record)
    assert decoded.skipped == {}
    [case] = decoded.cases
    assert case["case_id"] == response.id and case["output"] == "Paris."
    assert case["timestamp"] == response.created
    assert case["metadata"] == {"model": response.model, "model_version": "v7"}
    judged = Case.model_validate(case)
    assert judged.input == "Capital of France?"
    assert judged.conversation == "system: You are terse.\nuser: Hi\nassistant: Hello."


def test_request_and_response():
    record = {"request": REQUEST, "response": _completion({"content": "Paris."}),
              "metadata": {"model": "my-alias", "team": "search"}, "case_id": "order-17",
              "timestamp": "2024-06-10T12:00:00Z"}
    [case] = _decode(record).cases
    assert case == {"case_id": "order-17", "output": "Paris.", "messages": REQUEST["messages"],
                    "timestamp": "2024-06-10T12:00:00Z",
                    # The record's own labels win over the response's model.
                    "metadata": {"model": "my-alias", "team": "search"}}


def test_the_response_alone():
    [case] = DECODER.decode_json(_completion({"content": "Paris."})).cases
    assert case == {"case_id": "chatcmpl-abc", "output": "Paris.", "timestamp": 1718000000,
                    "metadata": {"model": "gpt-4o-2024-08-06"}}
    assert Case.model_validate(case).conversation is None


def test_the_requests_model_when_the_response_names_none():
    response = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    [case] = DECODER.decode_json({"request": REQUEST, "response": response}).cases
    assert case["metadata"] == {"model": "gpt-4o"} and "case_id" not in case


def test_stored_completion_metadata_are_labels():
    response = _completion({"content": "ok"}, metadata={"prompt_version": "p3"})
    [case] = DECODER.decode_json(response).cases
    assert case["metadata"] == {"model": "gpt-4o-2024-08-06", "prompt_version": "p3"}


def test_every_choice_is_a_case():
    record = {"request": {**REQUEST, "n": 2},
              "response": _completion({"content": "Paris."}, {"content": "It is Paris."})}
    decoded = _decode(record)
    assert DECODER.many_per_record
    assert [c["case_id"] for c in decoded.cases] == ["chatcmpl-abc:0", "chatcmpl-abc:1"]
    assert [c["output"] for c in decoded.cases] == ["Paris.", "It is Paris."]
    assert all(c["messages"] == REQUEST["messages"] for c in decoded.cases)


def test_choices_without_text_are_counted_not_judged():
    tool_call = {"content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    decoded = _decode({"request": REQUEST, "response": _completion(
        tool_call, {"content": "Sunny."}, {"content": ""},
        {"content": "Let me check.", **{k: v for k, v in tool_call.items() if k != "content"}})})
    assert [c["output"] for c in decoded.cases] == ["Sunny.", "Let me check."]
    assert [c["case_id"] for c in decoded.cases] == ["chatcmpl-abc:1", "chatcmpl-abc:3"]
    assert decoded.skipped == {"tool_calls": 1, "empty_output": 1}
    filtered = DECODER.decode_json(_completion({"content": None}, finish="content_filter"))
    assert filtered.cases == [] and filtered.skipped == {"content_filter": 1}


def test_text_parts_and_refusals_are_the_output():
    response = _completion({"content": None, "refusal": "I can't help with that."})
    assert DECODER.decode_json(response).cases[0]["output"] == "I can't help with that."
    parts = {"choices": [{"message": {"role": "assistant", "content": [
        {"type": "text", "text": "Paris"}, {"type": "text", "text": "is the capital."}]}}]}
    assert DECODER.decode_json(parts).cases[0]["output"] == "Paris\nis the capital."


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfe", "openai: value is not valid UTF-8 (byte 0)"),
    (b"{not json", "openai: value is not valid JSON"),
    (b"[1, 2]", "openai: the record must be an object, got an array"),
    (b'{"id": "x", "model": "m"}', "openai: expected a chat.completion (with choices) or a "
                                   "{request, response} record, found keys: id, model"),
    (b'{"choices": []}', "openai: response has no choices"),
    (b'{"choices": {"0": {}}}', "openai: response.choices must be an array, got an object"),
    (b'{"request": {}, "response": "ok"}', "openai: response must be an object, got a string"),
    (b'{"request": [], "response": {"choices": [{}]}}',
     "openai: request must be an object, got an array"),
    (b'{"request": {"messages": "hi"}, "response": {"choices": [{"message": {}}]}}',
     "openai: request.messages must be an array, got a string"),
    (b'{"choices": [{"index": 0}]}', "openai: choices.0.message must be an object, got null"),
    (b'{"choices": [{"message": {"content": 42}}]}',
     "openai: choices.0.message.content must be a string or an array of content parts, "
     "got a number"),
    (b'{"response": {"choices": [{"message": {"content": "x"}}]}, "metadata": ["a"]}',
     "openai: metadata must be an object of labels, got an array"),
    (b'{"object": "chat.completion.chunk", "choices": [{"delta": {}}]}',
     "openai: streamed chunks are not read; log the assembled chat.completion"),
])
def test_broken_records_name_what_is_wrong(raw, reason):
    with pytest.raises(UndecodableRecord) as caught:
        DECODER.decode(raw, {})
    assert str(caught.value).startswith(reason)


def test_bad_request_messages_are_a_bad_case_not_a_bad_record():
    # The record is readable; the case says which message is wrong when validated.
    record = {"request": {"messages": [{"content": "no role"}]},
              "response": _completion({"content": "ok"})}
    [case] = DECODER.decode_json(record).cases
    with pytest.raises(ValueError, match=r"messages\.0"):
        Case.model_validate(case)
