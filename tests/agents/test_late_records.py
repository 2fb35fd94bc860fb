"""Records lost on their way to an agent and read again *late*, after the
records behind them were done, as Faust's drain and stream lose one now and
then when the flow stops or resumes: each input is still judged once, and
the windows still count each judgment once, whether the late record is an
input (judged after the ones behind it) or a judgments record (counted after
the ones behind it). A worker test double drops each chosen record's first
delivery (``tests/support/dropping_worker.py``)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from support.faults import _judged, _window_figures, delivery_figures, sample_cases
from support.harness import StreamEnv, TopicWatcher, produce
from support.paths import SUPPORT

pytestmark = [pytest.mark.kafka, pytest.mark.both_brokers,
              pytest.mark.slow, pytest.mark.timeout(240)]

DROPPING = [sys.executable, str(SUPPORT / "dropping_worker.py")]


def test_records_read_again_late_are_judged_and_counted_once(
        kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path)
    cases = sample_cases(240, prefix="late")
    produced = [k.decode() for k, _, _ in cases]
    # The 4th input record of every partition; the 2nd judgments record of
    # every partition (one per metric key and batch: the first batch's are 0).
    env.env["DROP_FIRST_DELIVERY"] = f"{env.topic('input')}:*:3,{env.topic('judgments')}:*:1"
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        asyncio.run(produce(kafka_bootstrap, env.topic("input"), cases))
        with TopicWatcher(kafka_bootstrap, env.topic("results")) as results:
            worker = env.start_worker(command=DROPPING)
            done = results.wait_for(
                lambda r: set(produced) <= {x["case_id"] for x in r}, timeout=120)
            records = results.snapshot()
        figures = delivery_figures(produced, records)
        windows = _window_figures(env, worker.web_port, _judged(records))
    finally:
        env.stop_workers()
    logs = env.logs()
    dropped = [line for line in logs.splitlines() if "test double: dropped" in line]
    assert any(env.topic("input") in line for line in dropped), logs[-3000:]
    assert any(env.topic("judgments") in line for line in dropped), logs[-3000:]
    assert "never acked while later ones were; reading again from it" in logs
    assert done and figures["lost"] == 0 and figures["unexpected"] == 0, figures
    assert windows["window_total"] == windows["unique_judgments"] == 2 * len(produced), windows
