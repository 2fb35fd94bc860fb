"""guardrail.stream.liveness: a partition with lag whose committed offset stands
for stall_seconds is stalled; a busy one (lag, offsets moving) never is."""

from guardrail.stream.liveness import Liveness

TOPIC = "model-outputs"


def _run(liveness, steps, *, excused=False):
    """Feed ``(now, lag, committed)`` steps of partition 0; the last report."""
    report = None
    for now, lag, committed in steps:
        report = liveness.update([(TOPIC, 0, lag, committed)], now=now, excused=excused)
    return report


def test_a_busy_partition_with_lag_and_moving_offsets_is_never_stalled():
    liveness = Liveness(stall_seconds=10)
    # A long backlog drained 50 messages every 5 s: lag stays high for minutes.
    for i in range(60):
        report = liveness.update([(TOPIC, 0, 5000 - 50 * i, 100 + 50 * i)], now=5.0 * i)
        assert report.stalled == () and report.became_stalled == ()
        assert report.partitions[0].seconds_since_progress == 0


def test_lag_with_a_standing_offset_stalls_after_stall_seconds_once():
    liveness = Liveness(stall_seconds=10)
    report = _run(liveness, [(0, 7, 40), (5, 7, 40), (9.9, 9, 40)])
    assert report.stalled == () and report.partitions[0].seconds_since_progress == 9.9
    report = liveness.update([(TOPIC, 0, 9, 40)], now=10.0)
    [status] = report.became_stalled
    assert status.stalled and (status.topic, status.partition, status.lag) == (TOPIC, 0, 9)
    assert status.seconds_since_progress == 10.0
    later = liveness.update([(TOPIC, 0, 12, 40)], now=30.0)
    assert later.became_stalled == ()  # reported once, not at every update
    assert [s.seconds_since_progress for s in later.stalled] == [30.0]


def test_zero_lag_is_never_stalled_however_long_the_offset_stands():
    liveness = Liveness(stall_seconds=10)
    report = _run(liveness, [(t, 0, 40) for t in range(0, 1000, 7)])
    assert report.stalled == () and report.partitions[0].seconds_since_progress == 0
    # Lag that appears on a quiet partition counts from the last moment it had none.
    report = _run(liveness, [(1000, 0, 40), (1005, 3, 40), (1009, 3, 40)])
    assert report.stalled == () and report.partitions[0].seconds_since_progress == 9
    assert _run(liveness, [(1010, 3, 40)]).became_stalled


def test_progress_clears_a_stall_and_says_so_once():
    liveness = Liveness(stall_seconds=10)
    assert _run(liveness, [(0, 5, None), (12, 5, None)]).became_stalled  # never committed
    report = liveness.update([(TOPIC, 0, 4, 1)], now=13)  # the first commit
    assert report.stalled == () and [s.partition for s in report.progressed] == [0]
    assert report.partitions[0].seconds_since_progress == 0
    assert liveness.update([(TOPIC, 0, 4, 1)], now=14).progressed == ()
    # Caught up is progress too, even when the last commit was long ago.
    assert _run(liveness, [(30, 4, 1)]).became_stalled
    assert _run(liveness, [(31, 0, 1)]).progressed


def test_an_excused_partition_is_not_stalled_and_gets_the_full_time_after():
    liveness = Liveness(stall_seconds=10)
    assert _run(liveness, [(0, 5, 40), (10, 5, 40)]).became_stalled
    paused = _run(liveness, [(11, 5, 40), (60, 5, 40)], excused=True)
    assert paused.stalled == () and paused.progressed == ()
    assert paused.partitions[0].seconds_since_progress == 60  # the offset still stands
    assert _run(liveness, [(11, 5, 40)], excused=True).excused == ()  # said once
    liveness = Liveness(stall_seconds=10)
    _run(liveness, [(0, 5, 40), (10, 5, 40)])
    assert [s.partition for s in _run(liveness, [(11, 5, 40)], excused=True).excused] == [0]
    # Once the judge is back, the partition has stall_seconds to move again.
    assert _run(liveness, [(20, 5, 40)]).stalled == ()
    assert _run(liveness, [(21, 5, 40)]).became_stalled


def test_partitions_no_longer_held_are_forgotten_and_tracked_apart():
    liveness = Liveness(stall_seconds=10)
    liveness.update([(TOPIC, 0, 5, 40), (TOPIC, 1, 5, 40), ("judgments", 0, 0, 9)], now=0)
    report = liveness.update([(TOPIC, 0, 5, 40), (TOPIC, 1, 5, 41), ("judgments", 0, 0, 9)],
                             now=10)
    assert [(s.topic, s.partition) for s in report.stalled] == [(TOPIC, 0)]
    report = liveness.update([(TOPIC, 1, 5, 41)], now=11)  # partition 0 went elsewhere
    assert report.forgotten == (("judgments", 0), (TOPIC, 0))
    assert report.forgotten_stalled == ((TOPIC, 0),)
    # Assigned back later: its clock starts anew.
    assert liveness.update([(TOPIC, 0, 5, 40)], now=15).partitions[0].seconds_since_progress == 0


# The worker's wiring (guardrail.agents.liveness) on a stand-in consumer.

def _worker(stall_seconds=10):
    """A runtime whose consumer holds the input topic's partitions 0 and 1, the
    judgments topic's 0 and a changelog's 0; ``consumer.offsets`` sets them."""
    from collections import namedtuple
    from types import SimpleNamespace

    from guardrail.config.settings import load_settings
    from guardrail.stream.telemetry import Telemetry

    tp = namedtuple("TP", "topic partition")  # as faust's TP
    tps = [tp(t, p) for t, p in
           ((TOPIC, 0), (TOPIC, 1), ("judgments", 0), ("app-windows-changelog", 0))]
    highwater, committed = {}, {}
    consumer = SimpleNamespace(assignment=lambda: set(tps), randomly_assigned_topics=set(),
                               highwater=lambda tp: highwater.get(tuple(tp)),
                               _committed_offset=SimpleNamespace(
                                   get=lambda tp: committed.get(tuple(tp))))
    telemetry = Telemetry()
    runtime = SimpleNamespace(
        app=SimpleNamespace(consumer=consumer, tables=SimpleNamespace(changelog_topics=set())),
        settings=load_settings(environ={}, stall_seconds=stall_seconds), telemetry=telemetry,
        state={}, judge_paused=lambda: telemetry.paused._value.get() == 1)

    def offsets(**by_partition):
        """``p0=(highwater, committed)`` …; the judgments and changelog topics stay put."""
        for name, (high, done) in by_partition.items():
            highwater[(TOPIC, int(name[1:]))], committed[(TOPIC, int(name[1:]))] = high, done
        highwater[("judgments", 0)], committed[("judgments", 0)] = 5, 5
        highwater[("app-windows-changelog", 0)] = 900  # read, never committed

    return runtime, offsets


def _sample(telemetry, name, **labels):
    return telemetry.registry.get_sample_value(name, labels or None)


def test_the_worker_exports_logs_and_reports_a_stall_once(caplog):
    from guardrail.agents.liveness import check, stalled_now

    runtime, offsets = _worker()
    telemetry = runtime.telemetry
    caplog.set_level("INFO", logger="guardrail.worker")
    offsets(p0=(50, 10), p1=(80, 20))
    check(runtime, now=0)
    for now in (5, 10, 15):  # p0 stands; p1 is busy: its offset moves, lag stays
        offsets(p0=(50 + now, 10), p1=(80 + now, 20 + now))
        report = check(runtime, now=now)
    assert [(s.topic, s.partition) for s in report.stalled] == [(TOPIC, 0)]
    assert _sample(telemetry, "guardrail_stalled_partitions") == 1
    assert _sample(telemetry, "guardrail_seconds_since_progress", topic=TOPIC,
                   partition="0") == 15
    assert _sample(telemetry, "guardrail_seconds_since_progress", topic=TOPIC,
                   partition="1") == 0
    assert _sample(telemetry, "guardrail_consumer_lag", topic=TOPIC, partition="0") == 55
    # Faust's changelog is read, never committed: neither lag nor liveness.
    assert _sample(telemetry, "guardrail_seconds_since_progress",
                   topic="app-windows-changelog", partition="0") is None
    assert [s.as_dict() for s in stalled_now(runtime)] == [
        {"topic": TOPIC, "partition": 0, "lag": 55, "committed": 10,
         "seconds_since_progress": 15.0}]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"partition {TOPIC}[0] stalled: lag 50" in warnings[0]
    assert "for 10 s" in warnings[0]

    offsets(p0=(70, 30), p1=(100, 40))
    check(runtime, now=20)
    assert _sample(telemetry, "guardrail_stalled_partitions") == 0
    infos = [r.getMessage() for r in caplog.records if "progresses again" in r.getMessage()]
    assert infos == [f"partition {TOPIC}[0] progresses again: committed offset 30, lag 40"]
    assert stalled_now(runtime) == ()


def test_a_worker_paused_on_a_judge_outage_is_paused_not_stalled(caplog):
    from guardrail.agents.liveness import check

    runtime, offsets = _worker()
    caplog.set_level("INFO", logger="guardrail.worker")
    offsets(p0=(50, 10), p1=(50, 10))
    check(runtime, now=0)
    runtime.telemetry.paused.set(1)  # what processing sets while it holds a batch
    for now in (10, 60, 300):
        report = check(runtime, now=now)
        assert report.stalled == ()
    assert _sample(runtime.telemetry, "guardrail_stalled_partitions") == 0
    assert _sample(runtime.telemetry, "guardrail_seconds_since_progress", topic=TOPIC,
                   partition="0") == 300  # the truth, for whoever graphs it
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    runtime.telemetry.paused.set(0)  # the judge is back: stall_seconds to move again
    assert check(runtime, now=305).stalled == ()
    assert len(check(runtime, now=310).became_stalled) == 2


async def test_health_says_stalled_with_the_partitions_and_paused_wins():
    import json

    import faust
    from faust.web.drivers.aiohttp import Web

    from guardrail.agents import web
    from guardrail.agents.liveness import check

    runtime, offsets = _worker()
    pages = {}
    runtime.app.rebalancing = False
    runtime.app.page = lambda path: lambda handler: pages.setdefault(path, handler)
    web.register(runtime)
    driver = Web(faust.App("liveness-test", broker="kafka://127.0.0.1:1"))
    offsets(p0=(50, 10), p1=(50, 50))
    check(runtime, now=0)
    check(runtime, now=10)
    stalled = await pages["/health"](driver, None)
    body = json.loads(stalled.body)
    assert stalled.status == 200 and body["status"] == "stalled"
    assert [(p["topic"], p["partition"], p["lag"]) for p in body["stalled_partitions"]] == \
        [(TOPIC, 0, 40)]
    runtime.telemetry.paused.set(1)  # paused since the last check: the outage explains it
    paused = await pages["/health"](driver, None)
    assert paused.status == 503
    assert json.loads(paused.body)["status"] == "paused"
    assert json.loads(paused.body)["stalled_partitions"] == []
