"""Gate mode under the faults of issue #53: workers joining and leaving mid-stream
(a rolling restart among them), a 60 s judge outage, and the gate wired as a team
would (an app's producer, a ``read_committed`` consumer). Three SIGKILLs are in
``test_gate_stream.py``, a broker leader killed on the three-node cluster in
``tests/kafka/test_cluster_replication.py`` (its cluster starts once per file).

Each test accounts for every input offset (:meth:`Placements.account`): it ends on
the approved topic, the held topic or the DLQ, none is missing, none is in two of
them, records of a key reach the approved topic in input order, and nothing the
judge did not vouch for is approved. Copies of a record on its one topic are
counted and bounded; each test says where they come from.

The judge is a :class:`JudgeLedger` with a *second opinion* where a fault could make
the gate judge a record again: asked again about an output, it answers UNSAFE. A
record judged again and forwarded by the new verdict next to a copy forwarded by
the first would then be in two places; the gate must decide a record read again
from what it decided before (its gate table), so ``both`` stays 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from support.gate_traffic import (UNSAFE_TEXT, JudgeLedger, Placements, gate_env, header,
                                  input_partitions, keyed_cases, start_ready)
from support.harness import poll, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture
def judge(slow_judge):
    return slow_judge


def _said(account, env):
    """What a failed assertion shows: the account and the workers' last lines."""
    return dict(account), env.logs()[-4000:]


def _placed_once_in_order(account, env, n):
    """The guarantees every fault test asserts, on an account of ``n`` records."""
    assert account["missing"] == 0 and account["placed"] == n, _said(account, env)
    assert account["both"] == 0, _said(account, env)
    assert account["unsafe_approved"] == account["not_safe_approved"] == 0, _said(account, env)
    assert account["inversions"] == 0, _said(account, env)


@pytest.mark.both_brokers
def test_workers_joining_and_leaving_mid_stream_place_every_record_once_in_key_order(
        kafka_bootstrap, judge, tmp_path):
    """Three rebalances mid-stream, each moving partitions with records judged,
    decided, forwarded and not yet committed: a second worker joins (at a tenth of
    the records), the first leaves (SIGTERM, at half), then a rolling restart
    replaces the second (at three quarters): a third worker starts and the second is
    stopped as soon as the third answers /health, so the group rebalances for the
    newcomer while the second still finishes what it has in flight (the judge is
    slow then: 1 to 2.5 s a call). A partition's next owner decides its records
    from the gate table (changelog partition = input partition), or judges those of
    which no decision was kept yet; the worker it left decides and forwards none of
    them from then on."""
    judge.latency, judge.latency_max = 0.1, 0.5  # slow enough to rebalance mid-stream
    judge.responder = ledger = JudgeLedger(second_opinion=True)
    # At most 32 records between reading and forwarding: a rebalance's revoke phase
    # waits for all of them (with the default 1,000 it waited for the whole stream,
    # and the second worker got its partitions once every record was placed).
    env = gate_env(kafka_bootstrap, judge, tmp_path, topic_partitions=4, judge_concurrency=8,
                   gate_max_waiting=32)
    records = keyed_cases(480, keys=24)
    n = len(records)
    started = time.monotonic()
    try:
        first = start_ready(env)
        with Placements(env) as placed:
            asyncio.run(produce(env.bootstrap, env.topic("input"), records))
            placed.wait(n // 10, 120, settle=0)
            marks = {"first_placed": round(time.monotonic() - started, 1)}
            second = start_ready(env)
            assert poll(lambda: input_partitions(env, second), 60), env.logs()[-3000:]
            joined = placed.placed()
            marks["joined"] = round(time.monotonic() - started, 1)
            placed.wait(n // 2, 120, settle=0)
            first.send_signal(signal.SIGTERM)
            exits = [first.wait(60)]
            left = placed.placed()
            marks["left"] = round(time.monotonic() - started, 1)
            placed.wait(n * 3 // 4, 120, settle=0)
            judge.latency, judge.latency_max = 1.0, 2.5
            start_ready(env)  # the rolling restart: up, then the old one stopped
            second.send_signal(signal.SIGTERM)
            exits.append(second.wait(60))
            judge.latency, judge.latency_max = 0.1, 0.5
            replaced = placed.placed()
            marks["replaced"] = round(time.monotonic() - started, 1)
            placed.wait(n, 180)
            account = placed.account(n)
    finally:
        env.stop_workers()
    account.update(joined_at=joined, left_at=left, replaced_at=replaced, marks=marks,
                   judged_again=ledger.judged_again(),
                   seconds=round(time.monotonic() - started, 1))
    print("rebalances:", account)
    assert exits == [0, 0], _said(account, env)
    assert joined < left < replaced < n, _said(account, env)  # each one mid-stream
    _placed_once_in_order(account, env, n)
    # Copies: a forward under way when its partition is revoked (a stopping worker
    # does not finish what it has in flight) lands after the next owner read the
    # gate table, which still says "decided": the next owner forwards it again,
    # to the same topic with the same guardrail.source. At most the records in
    # flight at each of the three rebalances (gate_max_waiting, 32).
    assert account["twice"] <= 3 * 32, _said(account, env)


def _health(worker):
    """The worker's /health status code (0: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/health",
                                    timeout=3) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_a_60s_judge_outage_holds_records_back_and_approves_them_once_the_judge_answers(
        judge, kafka_bootstrap, tmp_path):
    """The judge answers 503 for 30 s, then hangs past the judge timeout for 30 s,
    a quarter into the stream. Judging waits outages out (stream/outage.py: a record
    whose judge calls fail for want of a judge is retried with backoff, unacked,
    ``/health`` 503), so the gate neither approves nor holds anything meanwhile: an
    outage is no verdict. Once the judge answers, every record is judged and placed
    by its verdict, as a team whose customers wait for these answers expects: the
    outage costs time, and holds nothing for ``judge_error`` (which would need a
    reviewer for each record) and approves nothing unjudged (``gate_on_error: hold``,
    the default, is never reached: the errors are not published). On the embedded
    broker only: the waiting is the worker's, the broker sees no difference."""
    judge.latency, judge.latency_max = 0.1, 0.3
    judge.responder = ledger = JudgeLedger()
    env = gate_env(kafka_bootstrap, judge, tmp_path, judge_timeout=2, judge_max_retries=1,
                   outage_max_backoff=4, judge_concurrency=16)
    # Each insult worded apart: the judgment cache would answer a repeated one
    # during the outage from an earlier verdict, without the judge.
    records = [(key, value.replace(UNSAFE_TEXT.encode(), f"{UNSAFE_TEXT} #{i}".encode()), ts)
               for i, (key, value, ts) in enumerate(keyed_cases(300, keys=20))]
    n = len(records)
    started = time.monotonic()
    try:
        worker = start_ready(env)
        with Placements(env) as placed:
            asyncio.run(produce(env.bootstrap, env.topic("input"), records))
            placed.wait(n // 4, 60, settle=0)
            judge.set_outage(True, 503)
            outage_began = time.monotonic()
            paused = poll(lambda: _health(worker) == 503, 20)
            time.sleep(max(0.0, outage_began + 3 - time.monotonic()))
            before = placed.placed()  # what was decided before the outage has left
            time.sleep(max(0.0, outage_began + 30 - time.monotonic()))
            judge.latency = 30.0  # from here on every call hangs past the 2 s timeout
            time.sleep(0.5)  # calls that came in before answer 503 still
            judge.set_outage(False)
            time.sleep(max(0.0, outage_began + 60 - time.monotonic()))
            during = placed.placed() - before
            judge.latency = 0.1
            recovered = time.monotonic()
            placed.wait(n, 120)
            drained = round(time.monotonic() - recovered, 1)
            account = placed.account(n)
            approved = placed.records()["approved"]
    finally:
        env.stop_workers()
    insults = sum(1 for _, value, _ in records if UNSAFE_TEXT.encode() in value)
    outputs = {json.loads(v)["case_id"]: json.loads(v)["output"] for _, v, _ in records}
    unjudged = [m for m in approved
                if not ledger.judged(outputs[header(m, "guardrail.case_id").decode()])]
    account.update(before_outage=before, placed_during_outage=during, paused=bool(paused),
                   drained_s=drained, seconds=round(time.monotonic() - started, 1))
    print("outage:", account)
    _placed_once_in_order(account, env, n)
    assert n // 4 <= before < n, _said(account, env)  # the outage came mid-stream
    assert account["paused"], _said(account, env)  # /health said so: 503 "paused"
    assert during == 0, _said(account, env)  # nothing approved or held while it lasted
    assert unjudged == [], _said(account, env)  # approved only on the judge's own answers
    # Every record judged after it: held only for its insult, the rest approved.
    assert account["hold_reasons"] == {b"unsafe": insults}, _said(account, env)
    assert (account["approved"], account["dlq"]) == (n - insults, 0), _said(account, env)
    # The outage did not burn through the topic: no twice-forwarded copies either.
    assert account["twice"] == 0, _said(account, env)


@pytest.mark.both_brokers
def test_as_a_team_wires_it_an_app_produces_guardrail_gates_a_read_committed_consumer_delivers(
        kafka_bootstrap, judge, tmp_path):
    """An assistant's answers to support tickets go out by e-mail. The app produces
    each answer with its own client (key: the ticket, headers: its trace and
    recipient); guardrail gates the topic; the mailer is a plain aiokafka consumer
    group reading the approved topic ``read_committed``, dropping a copy by
    ``guardrail.source`` and committing after each send. It sends exactly the
    answers the judge found SAFE, each once, in each ticket's order, with the app's
    headers as they were; the held topic has the rest, each with its reason."""
    judge.latency, judge.latency_max = 0.01, 0.2  # answers come back in any order
    judge.responder = ledger = JudgeLedger()
    env = gate_env(kafka_bootstrap, judge, tmp_path)
    answers = _ticket_answers(tickets=12, per_ticket=10)
    try:
        start_ready(env)
        asyncio.run(_app_produces(env.bootstrap, env.topic("input"), answers))
        sent, dropped = asyncio.run(_mailer(env.bootstrap, env.approved, expect=sum(
            1 for a in answers if a["safe"]), group=f"mailer-{tmp_path.name}"))
        with Placements(env) as placed:
            placed.wait(len(answers), 60)
            account = placed.account(len(answers))
    finally:
        env.stop_workers()
    print("end to end:", account, {"sent": len(sent), "dropped_copies": dropped})
    _placed_once_in_order(account, env, len(answers))
    safe = [a for a in answers if a["safe"]]
    # Exactly the answers judged SAFE, each once (no copy even reached the mailer).
    assert sorted(m["case_id"] for m in sent) == sorted(a["case_id"] for a in safe), sent
    assert dropped == 0
    for ticket in {a["ticket"] for a in answers}:  # in each ticket's order
        mine = [m["case_id"] for m in sent if m["ticket"] == ticket]
        assert mine == [a["case_id"] for a in safe if a["ticket"] == ticket], (ticket, mine)
    assert all(m["verdict"] == b"SAFE" and m["gate_case_id"] == m["case_id"] for m in sent)
    assert all(m["headers"][:2] == [("traceparent", m["trace"]), ("mail-to", m["to"])]
               for m in sent)  # the app's own headers, first and as they were
    assert account["hold_reasons"] == {b"unsafe": len(answers) - len(safe)}
    assert all(ledger.judged(a["output"]) for a in safe)


def _ticket_answers(*, tickets: int, per_ticket: int) -> list[dict]:
    """Answers to support tickets, interleaved across tickets; every 7th is rude."""
    answers = []
    for i in range(tickets * per_ticket):
        ticket, turn = i % tickets, i // tickets
        rude = i % 7 == 3
        output = (f"Read the manual yourself, {UNSAFE_TEXT}." if rude
                  else f"Ticket {ticket}, reply {turn}: your refund is on its way.")
        answers.append({"case_id": f"t{ticket}-r{turn}", "ticket": f"ticket-{ticket}",
                        "output": output, "safe": not rude,
                        "trace": f"00-{i:032x}-{i:016x}-01".encode(),
                        "to": f"customer-{ticket}@example.com".encode()})
    return answers


async def _app_produces(bootstrap: str, topic: str, answers: list[dict]) -> None:
    """The app's producer: its own client, acks from every in-sync replica."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for a in answers:
            value = json.dumps({"case_id": a["case_id"], "output": a["output"],
                                "metadata": {"model": "support-assistant"}}).encode()
            await producer.send(topic, value, key=a["ticket"].encode(),
                                headers=[("traceparent", a["trace"]), ("mail-to", a["to"])])
        await producer.flush()
    finally:
        await producer.stop()


async def _mailer(bootstrap: str, topic: str, *, expect: int, group: str,
                  timeout: float = 90, settle: float = 3) -> tuple[list[dict], int]:
    """The downstream consumer: a group reading ``read_committed``, a copy dropped by
    ``guardrail.source``, offsets committed after each batch is "sent". Returns the
    mails sent and the copies dropped."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    sent: list[dict] = []
    seen: set[bytes] = set()
    dropped = 0
    loop = asyncio.get_running_loop()
    deadline, quiet_until = loop.time() + timeout, None
    try:
        while loop.time() < deadline and (quiet_until is None or loop.time() < quiet_until):
            batch = await consumer.getmany(timeout_ms=300)
            for record in (r for records in batch.values() for r in records):
                source = header(record, "guardrail.source")
                if source in seen:
                    dropped += 1
                    continue
                seen.add(source)
                body = json.loads(record.value)
                headers = list(record.headers or ())
                sent.append({"case_id": body["case_id"], "ticket": record.key.decode(),
                             "verdict": header(record, "guardrail.verdict"),
                             "gate_case_id": (header(record, "guardrail.case_id")
                                              or b"").decode(),
                             "headers": headers, "trace": dict(headers)["traceparent"],
                             "to": dict(headers)["mail-to"]})
            if batch:
                await consumer.commit()
            if quiet_until is None and len(sent) >= expect:
                quiet_until = loop.time() + settle  # a copy or an extra would come by then
    finally:
        await consumer.stop()
    return sent, dropped

