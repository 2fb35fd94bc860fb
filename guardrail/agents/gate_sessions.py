"""Session holds in the worker (``gate_session_hold``): the session assembler's judge
puts a hold on each session it judges UNSAFE, and every worker's gate follows the
holds (:class:`~guardrail.gate.sessions.SessionHolds`).

    judge = HoldingSessionJudge(assembled_judge(runtime, session_turns=False), runtime)
    records = await judge.process(messages)   # + a hold per UNSAFE session judgment
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..gate.decision import GatePolicy, decide
from ..gate.review import session_item, with_item
from ..gate.sessions import hold_record, held_sessions_topic
from ..kafka.changelog import TopicFollower
from ..stream.processing import MessageJudge, Outgoing, RawMessage, RecordJudgment

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["HoldingSessionJudge", "HoldsFollower"]

#: Only an UNSAFE verdict holds a session: not a judge error, nor an unsure one.
_SESSION_POLICY = GatePolicy(on_error="pass", unsure="pass")


class HoldingSessionJudge:
    """A session assembler's :class:`MessageJudge` that also writes a hold for
    every session judgment with an UNSAFE metric (and, review on, makes its review
    item ask release or keep). Everything else is the wrapped judge's."""

    def __init__(self, judge: MessageJudge, runtime: WorkerRuntime) -> None:
        s = runtime.settings
        self.judge = judge
        self.topic = held_sessions_topic(s.kafka.app_id)
        self.review = s.review if s.review.review_users_file is not None else None
        self.thresholds = dict(s.evaluation.verdict_thresholds or {})
        self.state = runtime.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.judge, name)

    async def process(self, batch: list[RawMessage], *, floor_of: Any = None) -> list[Outgoing]:
        records, bundles = await self.judge.judge_records(batch, floor_of=floor_of)
        for record in records:
            self._hold(record)
        return [out for record in records for out in record.outgoing] + bundles

    def _hold(self, record: RecordJudgment) -> None:
        for case in record.cases:
            if case.message is None or case.message.session is None:
                continue
            decision = decide(RecordJudgment(record.raw, cases=[case]), _SESSION_POLICY)
            if decision.reason != "unsafe":
                continue
            session_id = str(case.message.session.get("id") or case.message.session_id)
            if self._released(session_id):
                continue  # a reviewer let it through: its later judgments hold it no more
            key, value = hold_record(session_id, case.case_id, decision.held_by)
            record.outgoing.append(Outgoing(self.topic, key, value))
            if self.review is not None:
                item = session_item(case, decision.held_by, review=self.review,
                                    thresholds=self.thresholds,
                                    judge_model=self.judge.evaluator.judge.model)
                if item is not None:
                    record.outgoing = with_item(record.outgoing, item,
                                                review_topic=self.review.review_topic)


    def _released(self, session_id: str) -> bool:
        gate = self.state.get("gate")
        holds = getattr(gate, "held_sessions", None)
        return session_id in getattr(holds, "released", ())


class HoldsFollower:
    """The gate-sessions topic followed into the gate's session holds (a service)."""

    def __init__(self, runtime: WorkerRuntime, holds: Any) -> None:
        s = runtime.settings
        self.follower = TopicFollower(s.kafka, held_sessions_topic(s.kafka.app_id), holds,
                                      fetch_wait_ms=s.worker.consumer_fetch_wait_ms)

    @property
    def caught_up(self) -> bool:
        return self.follower.caught_up

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()
