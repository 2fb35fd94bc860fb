"""Event times as records print them: exact to the millisecond, 1970 to 9999."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from guardrail._event_time import now_ms, parse_event_time, utc_iso

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _exact(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")


@pytest.mark.parametrize("ms", [0, 1, 999, 1000, 1_764_312_832_123, -1, -1500,
                                253_402_300_799_999])
def test_whole_milliseconds_print_exactly(ms):
    assert utc_iso(ms) == _exact(ms)


def test_any_millisecond_prints_as_datetime_would_and_each_second_stays_right():
    draw = random.Random(39)
    # Consecutive messages share a second, so its text is held: every one of
    # these must still print its own millisecond, in any order.
    stamps = [draw.randrange(0, 253_402_300_800_000) for _ in range(20_000)]
    stamps += [1_764_312_832_000 + draw.randrange(0, 3000) for _ in range(5000)]
    for ms in stamps:
        assert utc_iso(ms) == _exact(ms), ms


def test_the_last_instant_is_exact():
    # A float division gave .998 here (and off by one from the 2780s on).
    assert utc_iso(253_402_300_799_999) == "9999-12-31T23:59:59.999+00:00"


def test_fractional_milliseconds_are_cut_as_before():
    assert utc_iso(1_764_312_832_123.7) == "2025-11-28T06:53:52.123+00:00"
    assert utc_iso(1_764_312_832_123.0) == utc_iso(1_764_312_832_123)


def test_now_is_whole_milliseconds_and_round_trips():
    before = now_ms()
    assert isinstance(before, int)
    assert parse_event_time(utc_iso(before)) == before
