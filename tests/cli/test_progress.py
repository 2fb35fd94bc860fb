"""The progress reporter of run, replay and calibrate, on a fake clock."""

import io

import pytest

from guardrail.cli.progress import Progress, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _progress(stream, clock, **kwargs):
    return Progress("judged", unit="cases", total=40, stream=stream, clock=clock, **kwargs)


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (7.4, "0:07"), (750, "12:30"),
                                           (3723, "1:02:03"), (-3, "0:00")])
def test_durations_read_like_a_clock(seconds, text):
    assert format_duration(seconds) == text


def test_a_log_gets_a_plain_line_every_interval_and_a_closing_line():
    clock, log = FakeClock(), io.StringIO()
    with _progress(log, clock, interval=5.0) as progress:
        clock.now += 2
        progress.update(4)
        assert log.getvalue() == ""  # not yet: one line per interval, not per item
        clock.now += 3
        progress.update(10)  # 10 in 5 s: 2/s, 30 left: 15 s
        assert log.getvalue() == "judged 10/40 cases (25%)  2.0/s  ETA 0:15\n"
        clock.now += 1
        progress.update(12)
        assert log.getvalue().count("\n") == 1
        clock.now += 4
        progress.update(20)  # 20 in 10 s
        clock.now += 10
        progress.update(40)
    lines = log.getvalue().splitlines()
    assert lines[1] == "judged 20/40 cases (50%)  2.0/s  ETA 0:10"
    assert lines[2:] == ["judged 40/40 cases in 0:20 (2.0/s)"]
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()


def test_a_terminal_gets_one_redrawn_line_ended_once():
    clock, tty = FakeClock(), Terminal()
    with _progress(tty, clock) as progress:
        assert tty.getvalue() == "\rjudged 0/40 cases (0%)  ETA --"
        clock.now += 4
        progress.update(8)  # 2/s, 32 left
        assert tty.getvalue().endswith("\rjudged 8/40 cases (20%)  2.0/s  ETA 0:16")
        progress.update(9)  # same instant: not redrawn (at most 10 redraws a second)
        assert "9/40" not in tty.getvalue()
        clock.now += 16
        progress.update(40)
    text = tty.getvalue()
    assert text.endswith("\rjudged 40/40 cases (100%)  2.0/s  ETA 0:00\n")
    assert text.count("\n") == 1 and "\x1b" not in text


def test_a_shorter_line_covers_the_longer_one_before_it():
    clock, tty = FakeClock(), Terminal()
    progress = Progress("replayed", stream=tty, clock=clock, total=1000)
    clock.now += 1
    progress.update(5)
    longer = tty.getvalue().split("\r")[-1]
    clock.now += 1
    progress.update(0)  # e.g. a restarted count: "ETA --" is shorter than what it replaces
    last = tty.getvalue().split("\r")[-1]
    assert last.rstrip() == "replayed 0/1000 (0%)  ETA --"
    assert len(last) == len(longer) > len(last.rstrip())


def test_total_learnt_later_and_unknown_total():
    clock, log = FakeClock(), io.StringIO()
    progress = Progress("replayed", unit="messages", stream=log, clock=clock, interval=1)
    clock.now += 2
    progress.update(6)
    assert log.getvalue() == "replayed 6 messages  3.0/s\n"
    clock.now += 2
    progress.update(12, total=24)
    assert log.getvalue().splitlines()[-1] == "replayed 12/24 messages (50%)  3.0/s  ETA 0:04"


def test_quiet_writes_nothing_at_all():
    clock, tty = FakeClock(), Terminal()
    with _progress(tty, clock, enabled=False) as progress:
        clock.now += 60
        progress.update(40)
    assert tty.getvalue() == ""


def test_after_a_failure_a_log_gets_no_closing_line_and_a_terminal_a_newline():
    clock, log, tty = FakeClock(), io.StringIO(), Terminal()
    for stream in (log, tty):
        with pytest.raises(RuntimeError):
            with _progress(stream, clock):
                raise RuntimeError("judge exploded")
    assert log.getvalue() == ""  # the error message is the next thing the user reads
    assert tty.getvalue().endswith("\n")


def test_finish_is_idempotent():
    clock, log = FakeClock(), io.StringIO()
    progress = _progress(log, clock)
    progress.update(40)
    progress.finish()
    progress.finish()
    progress.update(40)
    assert log.getvalue().count("\n") == 1


def test_items_tried_and_missed_are_not_counted_as_done():
    clock, log = FakeClock(), io.StringIO()
    with _progress(log, clock, interval=5.0, missed_label="not judged") as progress:
        clock.now += 5
        progress.update(4, missed=6)  # 10 tried in 5 s: 2/s, 30 left
        assert log.getvalue() == "judged 4/40 cases (10%, 6 not judged)  2.0/s  ETA 0:15\n"
        clock.now += 15
        progress.update(4, missed=36)  # everything tried: the closing line is next
    closing = "judged 4/40 cases (36 not judged) in 0:20 (2.0/s)"
    assert log.getvalue().splitlines()[1:] == [closing]
    tty = Terminal()
    with _progress(tty, clock, missed_label="not judged") as progress:
        clock.now += 1
        progress.update(0, missed=40)  # all tried, none done: the line is complete
    assert tty.getvalue().endswith("\rjudged 0/40 cases (0%, 40 not judged)  40.0/s  ETA 0:00\n")
