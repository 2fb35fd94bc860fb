"""An agent run as one case to judge: its request, final answer, conversation and
``trajectory``, named by its root span so the verdict lands where the team looks::

    case = run_case(spans, status="complete")
    case["case_id"]     # '4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7' (trace:root span)
    case["trace"]       # {'trace_id': '4bf9…', 'span_id': '00f0…'}
    case["input"], case["output"]       # the user's request, the run's final answer
    case["trajectory"]  # see :mod:`.trajectory`
    case["metadata"]    # {'model': 'gpt-4o', 'agent': 'mail-assistant', 'agent_version': '4', …}
    case["run"]         # {'agent': 'mail-assistant', 'agent_version': '4', 'spans': 9,
                        #  'tool_calls': 3, 'models': ['gpt-4o'], 'status': 'complete'}
    case["conversation_id"]   # 'chat-7' when a span of the run names its conversation

The request is the last user turn of the root agent span's input, else of the first
model call's input (earlier user turns there are history). The final answer is the
root agent span's answer, else the text of the model turn that ended last. A run
is one turn of the conversation the root names, else the first span (by start)
that names one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from .spans import RunSpan
from .steps import steps_from_spans
from ...judging.trajectory import render_trajectory

__all__ = ["run_case", "root_span", "MAX_CONVERSATION_ANSWERS", "NO_FINAL_ANSWER"]

#: The output of a run that ended without a final answer: it is still judged
#: (its trajectory is what matters), and bias/toxicity see this note.
NO_FINAL_ANSWER = "(the run ended without a final answer)"

#: Assistant turns (before the final answer) kept in a run case's ``messages``.
MAX_CONVERSATION_ANSWERS = 5


def _start(span: RunSpan) -> tuple[int, str]:
    return span.start_ns, span.span_id


def root_span(spans: Sequence[RunSpan]) -> RunSpan | None:
    """The run's root: the parentless span, else the earliest agent span whose parent
    is not in the run (the root lives in another service), else the earliest span."""
    if not spans:
        return None
    parentless = [s for s in spans if s.parent_id is None]
    if parentless:
        return min(parentless, key=_start)
    ids = {s.span_id for s in spans}
    agents = [s for s in spans if s.kind == "agent" and s.parent_id not in ids]
    return min(agents or spans, key=_start)


def run_case(spans: Sequence[RunSpan], *, status: Literal["complete", "idle", "truncated"],
             max_chars: int = 16000, result_max_chars: int = 2000) -> dict[str, Any]:
    """The case JSON of the run ``spans`` make (one trace); ValueError without spans."""
    root = root_span(spans)
    if root is None:
        raise ValueError("run_case: a run needs at least one span")
    ordered = sorted({s.span_id: s for s in spans}.values(), key=_start)
    llms = [s for s in ordered if s.kind == "llm"]
    agents = [root] + [s for s in ordered if s.kind == "agent" and s is not root]
    request = _request(agents, llms)
    final = _final(root, llms)
    steps = steps_from_spans(ordered, root.span_id)
    metadata = _metadata(root, ordered, llms)
    agent, version = metadata.get("agent"), metadata.get("agent_version")
    case: dict[str, Any] = {
        "case_id": f"{root.trace_id}:{root.span_id}",
        "trace": {"trace_id": root.trace_id, "span_id": root.span_id},
        "input": request,
        "output": final,
        "messages": _conversation(request, llms, final),
        "trajectory": render_trajectory(request, steps, final, max_chars=max_chars,
                                        result_max_chars=result_max_chars),
        "timestamp": (root.end_ns or max(s.end_ns for s in ordered)) // 1_000_000,
        "metadata": metadata,
        "run": {"agent": agent, "agent_version": version, "spans": len(ordered),
                "tool_calls": sum(step.kind == "tool_call" for step in steps),
                "models": sorted({s.labels["model"] for s in llms if s.labels.get("model")}),
                "status": status},
        "conversation_id": _conversation_id(root, ordered),
    }
    return {key: value for key, value in case.items() if value is not None}


def _conversation_id(root: RunSpan, ordered: Sequence[RunSpan]) -> str | None:
    return next((s.conversation_id for s in (root, *ordered) if s.conversation_id), None)


def _last_user(span: RunSpan) -> str | None:
    users = [m["content"] for m in span.messages if m.get("role") == "user" and m.get("content")]
    return users[-1] if users else None


def _request(agents: Sequence[RunSpan], llms: Sequence[RunSpan]) -> str | None:
    for span in (*(a for a in agents if a.kind == "agent"), *llms[:1]):
        request = _last_user(span)
        if request:
            return request
    return None


def _final(root: RunSpan, llms: Sequence[RunSpan]) -> str | None:
    if root.output:
        return root.output
    answered = [s for s in llms if s.output]
    return max(answered, key=lambda s: (s.end_ns, s.start_ns)).output if answered else None


def _conversation(request: str | None, llms: Sequence[RunSpan],
                  final: str | None) -> list[dict[str, str]]:
    """The user's request and the model's text turns before the final answer (the
    case's ``output``), the latest few: what a conversation rubric reads."""
    answers: list[str] = []
    for span in llms:
        text = (span.output or "").strip()
        if text and text != (final or "").strip() and (not answers or answers[-1] != text):
            answers.append(text)
    turns = [{"role": "user", "content": request}] if request else []
    turns.extend({"role": "assistant", "content": text}
                 for text in answers[-MAX_CONVERSATION_ANSWERS:])
    return turns


def _metadata(root: RunSpan, ordered: Sequence[RunSpan],
              llms: Sequence[RunSpan]) -> dict[str, str]:
    """Labels over the run: the root's first, then each span's in start order for the
    labels still missing; ``model`` from the model call that ended last; ``agent`` and
    ``agent_version`` from the root, else the first agent span that names them."""
    merged = dict(root.labels)
    for span in ordered:
        for label, value in span.labels.items():
            merged.setdefault(label, value)
    models = [s for s in sorted(llms, key=lambda s: s.end_ns) if s.labels.get("model")]
    if models:
        merged["model"] = models[-1].labels["model"]
    named = [root] + [s for s in ordered if s.kind == "agent"]
    for key, attribute in (("agent", "agent_name"), ("agent_version", "agent_version")):
        value = next((getattr(s, attribute) for s in named if getattr(s, attribute)), None)
        if value:
            merged[key] = value
    if "agent_version" not in merged and merged.get("model_version"):
        # No agent span said it (its root never came): the service's version, as
        # for agent spans without gen_ai.agent.version.
        merged["agent_version"] = merged["model_version"]
    return merged
