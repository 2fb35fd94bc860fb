"""The conversation id a turn carries, read from every input format (InputMessage.session_id),
and real multi-turn traffic from instrumented clients decoded into turns of their sessions."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from support.agent_traffic import ScriptedModel
from support.session_traffic import CONVENTIONS, SMALL_TALK, SPLIT_PHISHING, converse

from guardrail.formats import build_decoder
from guardrail.formats.mapping import MappingDecoder
from guardrail.formats.openai import OpenAIDecoder
from guardrail.formats.otlp import OtlpDecoder
from guardrail.formats.otlp_conventions import DEFAULT_ASSOCIATION_KEYS
from guardrail.formats.otlp_sessions import TraceConversations
from guardrail.formats.settings import InputSettings
from guardrail.assembly.runs.case import run_case
from guardrail.assembly.runs.routing import RunRouter
from guardrail.assembly.runs.spans import RunSpan
from guardrail.assembly.sessions.settings import SessionSettings
from guardrail.stream.envelope import (BadInput, InputMessage, Source, decode_input,
                                       decode_record, message_from_case)

LIMIT = 1_000_000
SOURCE = Source("in", 0, 7)


def _message(**fields) -> InputMessage | BadInput:
    return decode_input(json.dumps({"output": "Hi", **fields}).encode(), max_bytes=LIMIT)


def _decoded(raw: bytes, decoder) -> list[InputMessage | BadInput]:
    record = decode_record(raw, max_bytes=LIMIT, source=SOURCE, decoder=decoder)
    assert not isinstance(record, BadInput), record
    return [item for _, item in record.items]


# --- case JSON -----------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "expected"), [
    ({"conversation_id": " chat-7 "}, "chat-7"),
    ({"conversation_id": 42}, "42"),
    ({"metadata": {"conversation_id": "m-1"}}, "m-1"),
    ({"conversation_id": "top", "metadata": {"conversation_id": "m-1"}}, "top"),
    ({"conversation_id": None, "metadata": {"conversation_id": "m-1"}}, "m-1"),
    ({"conversation_id": "x" * 200}, "x" * 200),
    ({}, None),
    ({"metadata": {"model": "m"}}, None),
])
def test_case_conversation_id_top_level_then_metadata(fields, expected):
    message = _message(**fields)
    assert isinstance(message, InputMessage)
    assert message.session_id == expected


@pytest.mark.parametrize(("fields", "reason"), [
    ({"conversation_id": {"id": 1}}, "conversation_id must be a non-empty string or a number, "
                                     "got an object"),
    ({"conversation_id": ["a"]}, "conversation_id must be a non-empty string or a number, "
                                 "got an array"),
    ({"conversation_id": True}, "got a boolean"),
    ({"conversation_id": "   "}, "conversation_id must be a non-empty string or a number, "
                                "got an empty string"),
    ({"conversation_id": "x" * 201}, "conversation_id is 201 characters, over the limit of 200"),
    ({"metadata": {"conversation_id": ""}}, "metadata.conversation_id must be"),
])
def test_case_bad_conversation_id_is_bad_input_naming_the_field(fields, reason):
    message = _message(**fields)
    assert isinstance(message, BadInput)
    assert message.reason.startswith("invalid case: ")
    assert reason in message.reason


def test_conversation_id_is_no_text_of_the_case():
    message = _message(conversation_id="chat-7", conversation="chat-7")
    assert "chat-7" not in message.case.model_dump_json()
    assert message.session_id == "chat-7"


# --- openai logs and input_mapping -----------------------------------------------------------

def _openai(**record) -> dict:
    return {"request": {"model": "m", "messages": [{"role": "user", "content": "Hi?"}]},
            "response": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                         "choices": [{"index": 0, "message": {"role": "assistant",
                                                              "content": "Hello."}}]},
            **record}


@pytest.mark.parametrize(("record", "expected"), [
    (_openai(conversation_id="top", metadata={"conversation_id": "labels"}), "top"),
    (_openai(metadata={"conversation_id": "labels"}), "labels"),
    (_openai(), None),
])
def test_openai_log_conversation_id(record, expected):
    [message] = _decoded(json.dumps(record).encode(), OpenAIDecoder())
    assert message.session_id == expected


def test_openai_stored_completion_metadata_names_the_conversation():
    record = _openai()
    record["request"]["metadata"] = {"conversation_id": "stored"}
    assert _decoded(json.dumps(record).encode(), OpenAIDecoder())[0].session_id == "stored"


def test_mapping_conversation_id_optional_and_checked():
    decoder = MappingDecoder({"output": "reply", "conversation_id": "chat.thread"})
    [found] = _decoded(b'{"reply": "Hi", "chat": {"thread": 9}}', decoder)
    [missing] = _decoded(b'{"reply": "Hi"}', decoder)
    assert (found.session_id, missing.session_id) == ("9", None)
    bad = decode_record(b'{"reply": "Hi", "chat": {"thread": {"a": 1}}}', max_bytes=LIMIT,
                        source=SOURCE, decoder=decoder)
    assert bad == BadInput("mapping: conversation_id (expression 'chat.thread') found an "
                           "object, not a string or a number")
    [too_long] = _decoded(json.dumps({"reply": "Hi", "chat": {"thread": "x" * 300}}).encode(),
                          decoder)
    assert isinstance(too_long, BadInput) and "conversation_id is 300 characters" in \
        too_long.reason


# --- OTLP spans --------------------------------------------------------------------------

ALL = {"gen_ai.conversation.id": "otel", "session.id": "openinference",
       "langfuse.session.id": "langfuse",
       "traceloop.association.properties.session_id": "traceloop-session",
       "traceloop.association.properties.conversation_id": "traceloop-conversation",
       "langsmith.metadata.session_id": "ls-session",
       "langsmith.metadata.conversation_id": "ls-conversation",
       "langsmith.metadata.thread_id": "ls-thread"}
ORDER = list(ALL)


@pytest.mark.parametrize("first", range(len(ORDER)))
def test_span_attributes_in_order_of_precedence(first):
    attrs = {name: ALL[name] for name in ORDER[first:]}
    attrs["gen_ai.conversation.id"] = ""  # Pydantic AI's value without a conversation
    if first == 0:
        attrs["gen_ai.conversation.id"] = "otel"
    assert TraceConversations().resolve([("t1", attrs)]) == [ALL[ORDER[first]]]


def test_association_keys_are_configurable_and_the_default_is_the_settings():
    assert DEFAULT_ASSOCIATION_KEYS == SessionSettings().session_association_keys
    attrs = {"traceloop.association.properties.chat_id": "c-1",
             "traceloop.association.properties.session_id": "s-1"}
    assert TraceConversations(["chat_id"]).resolve([("t", attrs)]) == ["c-1"]
    assert TraceConversations().resolve([("t", attrs)]) == ["s-1"]
    settings = SessionSettings(session_association_keys="thread, chat_id")
    decoder = build_decoder(InputSettings(input_format="otlp"), settings)
    assert decoder.conversations.names[4:6] == ("traceloop.association.properties.thread",
                                                "traceloop.association.properties.chat_id")


def test_langsmith_project_and_unknown_names_are_no_conversation():
    attrs = {"langsmith.trace.session_id": "project-uuid", "session_id": "bare",
             "session.id": {"nested": "map"}}
    assert TraceConversations().resolve([("t", attrs)]) == [None]


def test_trace_shares_its_id_within_a_record_and_remembers_it_boundedly():
    conversations = TraceConversations(remembered=2)
    assert conversations.resolve([("t1", {}), ("t1", {"session.id": "a"}), ("t2", {}),
                                  ("t1", {"session.id": "other"})]) == ["a", "a", None, "other"]
    assert conversations.resolve([("t1", {})]) == ["a"]  # a later record
    conversations.resolve([("t2", {"session.id": "b"}), ("t3", {"session.id": "c"})])
    assert conversations.resolve([("t1", {}), ("t3", {})]) == [None, "c"]  # t1 forgotten


# --- agent runs ------------------------------------------------------------------------

def _run_span(span_id: str, parent: str | None, conversation_id: str | None = None,
              kind: str = "llm") -> RunSpan:
    return RunSpan(trace_id="ab" * 16, span_id=span_id, parent_id=parent, name="chat",
                   kind=kind, start_ns=int(span_id, 16), end_ns=int(span_id, 16) + 5,
                   messages=({"role": "user", "content": "Hi"},), output="Hello",
                   conversation_id=conversation_id)


def test_run_span_carries_its_conversation_and_reads_older_records():
    span = _run_span("01" * 8, None, "chat-7", kind="agent")
    assert RunSpan.from_bytes(span.to_bytes()) == span
    older = json.loads(span.to_bytes())
    del older["conversation_id"]
    assert RunSpan.from_bytes(json.dumps(older).encode()).conversation_id is None
    with pytest.raises(ValueError, match="conversation_id must be a string"):
        RunSpan.from_bytes(json.dumps({**older, "conversation_id": 7}).encode())


def test_run_case_is_a_turn_of_the_conversation_any_span_names():
    root = _run_span("01" * 8, None, kind="agent")
    child = _run_span("02" * 8, "01" * 8, "chat-7")
    case = run_case([root, child], status="complete")
    assert case["conversation_id"] == "chat-7"
    assert message_from_case(case, None).session_id == "chat-7"
    assert "conversation_id" not in run_case([root], status="complete")


# --- real multi-turn traffic -------------------------------------------------------------

SCRIPTS = {"chat-attack": SPLIT_PHISHING, "chat-cats": SMALL_TALK}


@pytest.fixture(scope="module")
def traffic():
    with ScriptedModel() as model:
        return {convention: converse(model, SCRIPTS, convention=convention)
                for convention in CONVENTIONS}


def _assert_turns(messages: list, turns) -> None:
    assert len(messages) == len(turns)
    for message, turn in zip(messages, turns):
        assert isinstance(message, InputMessage), message
        assert message.session_id == turn.conversation_id
        assert message.case.output == turn.assistant
        assert message.case.input == turn.user
        users = [m for m in message.case.messages if m.role == "user"]
        assert len(users) == 1  # history is server-side: the span holds this turn only
        assert message.trace["trace_id"] == turn.trace_id


@pytest.mark.parametrize(("convention", "per"), [
    ("openinference", "span"), ("pydantic_ai", "span"), ("otel_parent", "turn")])
def test_real_traffic_turns_carry_their_conversation(traffic, convention, per):
    session_traffic = traffic[convention]
    decoder = OtlpDecoder()
    messages = [m for raw in session_traffic.records(per=per) for m in _decoded(raw, decoder)]
    _assert_turns(messages, session_traffic.turns)
    for conversation_id, script in SCRIPTS.items():
        turns = session_traffic.conversation(conversation_id)
        assert [(t.user, t.assistant) for t in turns] == list(script)
        assert len({t.trace_id for t in turns}) == len(script)  # each turn its own trace


def test_parent_only_id_reaches_a_child_in_a_later_record_not_an_earlier_one(traffic):
    turns = traffic["otel_parent"].turns
    decoder = OtlpDecoder()
    as_exported = [m for t in turns for raw in t.records for m in _decoded(raw, decoder)]
    assert [m.session_id for m in as_exported] == [None] * len(turns)  # child ended first
    decoder = OtlpDecoder()
    parent_first = [m for t in turns for raw in reversed(t.records)
                    for m in _decoded(raw, decoder)]
    _assert_turns(parent_first, turns)


def test_real_agent_runs_are_turns_of_their_conversation(traffic):
    session_traffic = traffic["pydantic_ai"]
    decoder = OtlpDecoder(runs=RunRouter())
    spans = defaultdict(list)
    for raw in session_traffic.records():
        decoded = decoder.decode(raw, {})
        assert decoded.cases == []
        for span in decoded.run_spans:
            spans[span.trace_id].append(span)
    messages = [message_from_case(run_case(spans[t.trace_id], status="complete"), None)
                for t in session_traffic.turns]
    _assert_turns(messages, session_traffic.turns)
