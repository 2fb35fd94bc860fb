"""Held records answered on the review page of a real worker (embedded broker, the
stand-in judge): a released record reaches the approved topic once, marked
``guardrail.released_by``; with ``gate_hold_blocks_key`` its key's later records
wait parked and follow it in order, and a kept one lets them go without it."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
import uuid

import bcrypt
import pytest
from support.gate_traffic import Placements, gate_env, header, start_ready
from support.harness import poll, produce, worker_page

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PASSWORD = "ana-pass-1"


def _auth() -> dict[str, str]:
    token = base64.b64encode(f"ana:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _review(port: int, body: dict | None = None) -> dict:
    """GET the held item (``body`` None) or POST an answer, as a script would."""
    url = f"http://127.0.0.1:{port}/review"
    if body is None:
        request = urllib.request.Request(url + "?format=json", headers=_auth())
    else:
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                         headers={**_auth(), "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


def _case(key: str, case_id: str, text: str) -> tuple[bytes, bytes, None]:
    return key.encode(), json.dumps({"case_id": case_id, "output": text}).encode(), None


def _review_env(bootstrap, judge, tmp_path, **settings):
    """A gate-mode env with the review queue on (one reviewer, ana)."""
    judge.reset()
    users = tmp_path / "reviewers.htpasswd"
    users.write_text(f"ana:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}\n")
    tag = uuid.uuid4().hex[:6]
    return gate_env(bootstrap, judge, tmp_path, topic_partitions=1, review_users_file=users,
                    review_topic=f"rev-{tag}", labels_topic=f"lab-{tag}", review_rate_safe=0,
                    review_band=0, **settings)


@pytest.fixture
def env(kafka_bootstrap, thread_judge, tmp_path):
    env = _review_env(kafka_bootstrap, thread_judge, tmp_path, gate_hold_blocks_key="true")
    yield env
    env.stop_workers()


def _case_ids(messages) -> list[str]:
    return [header(m, "guardrail.case_id").decode() for m in messages]


def _shown_item(port: int, timeout: float = 30) -> dict:
    """The review page's next item, waited for: the page folds the review topic, which
    the gate writes beside the held record, so the item may show a moment after it."""
    deadline = time.monotonic() + timeout
    shown = _review(port)
    while shown["item"] is None and time.monotonic() < deadline:
        time.sleep(0.3)
        shown = _review(port)
    return shown


def _answer_next(port: int, answer: str) -> str:
    """Answer the hold on the next item (agreeing with the judge), return its case id."""
    shown = _shown_item(port)
    item = shown["item"]
    assert item is not None and shown["gate_open"], shown
    assert item["gate"]["reason"] == "unsafe" and item["gate"]["blocks_key"] is True
    saved = _review(port, {"case_id": item["case_id"], "gate": answer,
                           "labels": [{"metric": m, "choice": "agree"}
                                      for m in shown["open_metrics"]]})
    assert saved["gate"] == answer, saved
    return item["case_id"]


def test_a_released_record_is_approved_once_and_its_key_follows_in_order(env):
    worker = start_ready(env)
    records = [_case("k", "k0", "fine 0"), _case("k", "k1", "you idiot"),
               _case("k", "k2", "fine 2"), _case("k", "k3", "fine 3"),
               _case("j", "j0", "fine j0"), _case("j", "j1", "you idiot"),
               _case("j", "j2", "fine j2")]
    with Placements(env) as placed:
        asyncio.run(produce(env.bootstrap, env.topic("input"), records))
        # k0 and j0 approved, k1 and j1 held; k2, k3 and j2 parked behind them.
        assert poll(lambda: len(placed.records()["held"]) == 2
                    and len(placed.records()["approved"]) == 2, 60), env.logs()[-3000:]
        time.sleep(2)
        assert sorted(_case_ids(placed.records()["approved"])) == ["j0", "k0"]
        metrics = worker_page(worker.web_port, "/metrics")
        assert "guardrail_gate_parked 3.0" in metrics
        answered = {_answer_next(worker.web_port, "release"),
                    _answer_next(worker.web_port, "keep")}
        assert answered == {"k1", "j1"}
        assert poll(lambda: len(placed.records()["approved"]) >= 6, 60), env.logs()[-3000:]
        time.sleep(3)  # a second copy would show by now
        approved = placed.records()["approved"]
    released = "k1" if _answer_of(approved, "k1") else "j1"
    kept = "j1" if released == "k1" else "k1"
    key = released[0]
    in_order = [c for c in _case_ids(approved) if c.startswith(key)]
    assert in_order == [f"{key}0", f"{key}1", f"{key}2", f"{key}3"][:len(in_order)]
    assert _case_ids(approved).count(released) == 1
    assert kept not in _case_ids(approved)
    assert sorted(_case_ids(approved)) == sorted(
        c for c in ("k0", "k1", "k2", "k3", "j0", "j1", "j2") if c != kept)
    copy = _answer_of(approved, released)
    assert header(copy, "guardrail.released_by") == b"ana"
    assert header(copy, "guardrail.hold_reason") == b"unsafe"
    assert copy.value == dict((c, v) for _, v, _ in records for c in [json.loads(v)["case_id"]]
                              )[released]
    metrics = worker_page(worker.web_port, "/metrics")
    assert 'guardrail_gate_reviews_total{answer="released"} 1.0' in metrics
    assert 'guardrail_gate_reviews_total{answer="confirmed"} 1.0' in metrics


def _answer_of(approved, case_id):
    return next((m for m in approved if header(m, "guardrail.case_id") == case_id.encode()), None)


def test_an_answer_survives_a_restart_and_is_carried_out_once(env):
    worker = start_ready(env)
    with Placements(env) as placed:
        asyncio.run(produce(env.bootstrap, env.topic("input"),
                            [_case("k", "k0", "you idiot"), _case("k", "k1", "fine")]))
        assert poll(lambda: len(placed.records()["held"]) == 1, 60), env.logs()[-3000:]
        _answer_next(worker.web_port, "release")
        assert poll(lambda: len(placed.records()["approved"]) == 2, 60), env.logs()[-3000:]
        env.stop_workers()
        # The restarted worker reads the answer again: k0 is released already.
        start_ready(env)
        asyncio.run(produce(env.bootstrap, env.topic("input"), [_case("k", "k2", "fine")]))
        assert poll(lambda: len(placed.records()["approved"]) >= 3, 60), env.logs()[-3000:]
        time.sleep(3)
        approved = _case_ids(placed.records()["approved"])
    assert approved == ["k0", "k1", "k2"]


def _turn(conversation: str, case_id: str, text: str) -> tuple[bytes, bytes, None]:
    value = {"case_id": case_id, "conversation_id": conversation, "input": "a question",
             "output": text}
    return conversation.encode(), json.dumps(value).encode(), None


def _next_item(port: int, kind: str, timeout: float = 60) -> dict:
    """Wait for the next item to be one the gate holds of ``kind``; keep the holds
    of records met before it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            shown = _review(port)
        except urllib.error.HTTPError as exc:  # 503 while the queue loads
            assert exc.code == 503, exc
            time.sleep(0.5)
            continue
        item = shown["item"]
        if item is not None and item["gate"] and item["gate"]["kind"] == kind:
            return shown
        if item is not None:  # an earlier item: keep its hold, agree with its judge
            _review(port, {"case_id": item["case_id"],
                           **({"gate": "keep"} if shown["gate_open"] else {}),
                           "labels": [{"metric": m, "choice": "agree"}
                                      for m in shown["open_metrics"]]})
            continue
        time.sleep(0.5)
    raise AssertionError(f"no {kind} item within {timeout:.0f}s")


def test_a_session_judged_unsafe_holds_its_later_turns_until_released(
        kafka_bootstrap, thread_judge, tmp_path):
    env = _review_env(kafka_bootstrap, thread_judge, tmp_path, gate_session_hold="true")
    try:
        worker = start_ready(env)
        with Placements(env) as placed:
            asyncio.run(produce(env.bootstrap, env.topic("input"),
                                [_turn("conv-1", "t1", "you idiot"),
                                 _turn("conv-2", "u1", "a fine answer")]))
            session = _next_item(worker.web_port, "session")["item"]
            assert (session["gate"]["session_id"], session["gate"]["reason"]) == (
                "conv-1", "session_unsafe")
            asyncio.run(produce(env.bootstrap, env.topic("input"),
                                [_turn("conv-1", "t2", "a fine answer"),
                                 _turn("conv-2", "u2", "another fine answer")]))
            assert poll(lambda: len(placed.records()["held"]) == 2, 60), env.logs()[-3000:]
            _review(worker.web_port, {"case_id": session["case_id"], "gate": "release"})
            time.sleep(2)  # the answer reaches the gate through the labels topic
            asyncio.run(produce(env.bootstrap, env.topic("input"),
                                [_turn("conv-1", "t3", "a fine answer")]))
            assert poll(lambda: len(placed.records()["approved"]) == 3, 60), env.logs()[-3000:]
            records = placed.records()
    finally:
        env.stop_workers()
    held = {header(m, "guardrail.case_id").decode(): header(m, "guardrail.hold_reason")
            for m in records["held"]}
    assert held == {"t1": b"unsafe", "t2": b"session_unsafe"}
    assert sorted(_case_ids(records["approved"])) == ["t3", "u1", "u2"]
