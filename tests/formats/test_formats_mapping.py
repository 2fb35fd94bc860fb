"""The ``mapping`` input format: case fields picked from any JSON event by JMESPath."""

import orjson
import pytest

from guardrail.errors import ConfigError
from guardrail.formats import UndecodableRecord
from guardrail.formats.mapping import MappingDecoder, parse_mapping
from guardrail.judging.models import Case

EVENT = {
    "id": 4711,
    "ts": 1718000000123,
    "event": {"llm": {"response": {"text": "Sure, here it is."}},
              "user": {"prompt": "Write me a haiku."}},
    "tags": {"ver": "v2", "canary": True, "shard": 3},
    "history": [{"speaker": "user", "said": "Hi"}, {"speaker": "assistant", "said": "Hello!"},
                {"speaker": "user", "said": "Write me a haiku."}],
}
MAPPING = {"case_id": "id", "timestamp": "ts", "output": "event.llm.response.text",
           "input": "event.user.prompt", "metadata.model_version": "tags.ver",
           "metadata.canary": "tags.canary", "metadata.shard": "tags.shard"}


def test_a_nested_event():
    decoder = MappingDecoder(MAPPING)
    assert (decoder.name, decoder.many_per_record) == ("mapping", False)
    [case] = decoder.decode(orjson.dumps(EVENT), {}).cases
    assert case == {"case_id": "4711", "timestamp": 1718000000123,
                    "output": "Sure, here it is.", "input": "Write me a haiku.",
                    "metadata": {"model_version": "v2", "canary": "true", "shard": "3"}}
    assert Case.model_validate(case).output == "Sure, here it is."


def test_messages_from_a_list_projection():
    decoder = MappingDecoder({"output": "event.llm.response.text",
                              "messages": "history[].{role: speaker, content: said}",
                              "context": "history[?speaker=='assistant'].said"})
    [case] = decoder.decode_json(EVENT).cases
    assert case["messages"][0] == {"role": "user", "content": "Hi"}
    assert case["context"] == ["Hello!"]
    judged = Case.model_validate(case)
    assert judged.input == "Write me a haiku."
    assert judged.conversation == "user: Hi\nassistant: Hello!"


def test_messages_alone_hold_the_output():
    event = {"turns": [*EVENT["history"], {"speaker": "assistant", "said": "Old pond..."}]}
    decoder = MappingDecoder({"messages": "turns[].{role: speaker, content: said}"})
    judged = Case.model_validate(decoder.decode_json(event).cases[0])
    assert judged.output == "Old pond..." and judged.input == "Write me a haiku."


@pytest.mark.parametrize("event, reason", [
    ({"event": {"llm": {}}}, "mapping: output (expression 'event.llm.response.text') "
                             "found nothing"),
    ({"event": {"llm": {"response": {"text": None}}}},
     "mapping: output (expression 'event.llm.response.text') found nothing"),
    ({"event": {"llm": {"response": {"text": {"parts": []}}}}},
     "mapping: output (expression 'event.llm.response.text') found an object, not a string"),
    ({"event": {"llm": {"response": {"text": 42}}}},
     "mapping: output (expression 'event.llm.response.text') found a number, not a string"),
    ([1, 2], "mapping: output (expression 'event.llm.response.text') found nothing"),
])
def test_a_field_that_finds_nothing_or_the_wrong_type_names_the_field(event, reason):
    decoder = MappingDecoder({"output": "event.llm.response.text"})
    with pytest.raises(UndecodableRecord) as caught:
        decoder.decode_json(event)
    assert str(caught.value) == reason


def test_every_mapped_field_is_required():
    decoder = MappingDecoder(MAPPING)
    event = {**EVENT, "tags": {"ver": "v2", "canary": False}}
    with pytest.raises(UndecodableRecord, match=r"^mapping: metadata\.shard \(expression "
                                                r"'tags\.shard'\) found nothing$"):
        decoder.decode_json(event)


@pytest.mark.parametrize("field, value, reason", [
    ("metadata.team", "tags", "metadata.team (expression 'tags') found an object, "
                              "not a string, number or boolean"),
    ("timestamp", "tags.canary", "timestamp (expression 'tags.canary') found a boolean, "
                                 "not a number or an ISO-8601 string"),
    ("messages", "event", "messages (expression 'event') found an object, "
                          "not an array of messages"),
    ("context", "history", "context (expression 'history') found an array, "
                           "not a string or an array of strings"),
    ("input", "abs(event)", "input (expression 'abs(event)') failed: In function abs(), "
                            "invalid type for value"),
])
def test_wrong_types_name_the_field(field, value, reason):
    decoder = MappingDecoder({"output": "event.llm.response.text", field: value})
    with pytest.raises(UndecodableRecord) as caught:
        decoder.decode_json(EVENT)
    assert str(caught.value).startswith(f"mapping: {reason}")


def test_undecodable_bytes():
    decoder = MappingDecoder({"output": "text"})
    with pytest.raises(UndecodableRecord, match="^mapping: value is not valid JSON"):
        decoder.decode(b"{oops", {})


@pytest.mark.parametrize("mapping, message", [
    ({"output": "event..text"}, "input_mapping: output: expression 'event..text' is not valid "
                                "JMESPath: Expecting: ['quoted_identifier', "
                                "'unquoted_identifier', 'lbracket', 'lbrace'], got: dot at "
                                "column 6"),
    ({"output": "event.llm["}, "input_mapping: output: expression 'event.llm[' is not valid "
                               "JMESPath: incomplete expression at column 10"),
    ({"output": "a ~ b"}, "input_mapping: output: expression 'a ~ b' is not valid JMESPath: "
                          "Unknown token ~ at column 2"),
    ({"output": "lower(text)"}, "input_mapping: output: expression 'lower(text)' calls "
                                "unknown function lower()"),
    ({"output": "length(a, b)"}, "input_mapping: output: expression 'length(a, b)' calls "
                                 "length() with 2 arguments, it takes 1"),
    ({"output": "  "}, "input_mapping: output: the expression is empty"),
    ({"output": 3}, "input_mapping: output: the expression must be a string, got a number"),
    ({"outptu": "text"}, "input_mapping: 'outptu' is not a case field (allowed: case_id, "
                         "output, input, context, reference, messages, trajectory, timestamp, "
                         "conversation_id, metadata.<label>)"),
    ({"output": "text", "redteam": "rt"}, "input_mapping: 'redteam' is not a case field"),
    ({"output": "text", "metadata.": "x"}, "input_mapping: 'metadata.' names no label"),
    ({"input": "prompt"}, "input_mapping: map output or messages (the text to judge); "
                          "mapped: input"),
    ({}, "input_mapping: map output or messages (the text to judge); mapped: nothing"),
])
def test_a_bad_mapping_is_one_config_error_line(mapping, message):
    with pytest.raises(ConfigError) as caught:
        MappingDecoder(mapping)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_parse_mapping_reads_the_environment_variables_json():
    text = '{"output": "event.llm.response.text", "metadata.model_version": "tags.ver"}'
    assert parse_mapping(text) == {"output": "event.llm.response.text",
                                   "metadata.model_version": "tags.ver"}
    assert MappingDecoder(text).decode_json(EVENT).cases[0]["metadata"] == {
        "model_version": "v2"}
    for bad, message in [("{oops", "input_mapping: not valid JSON: "),
                         ('["output"]', "input_mapping: must be an object of case field -> "
                                        "JMESPath expression, got an array")]:
        with pytest.raises(ConfigError) as caught:
            parse_mapping(bad)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
