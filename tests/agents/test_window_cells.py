"""guardrail.agents.window_cells: window-table changelog records → /rates rows.

The key and value literals were captured once from the changelog topic of a
running worker (faust-streaming 0.15.3, guardrail at 02d4db2, embedded
broker): six cases, two metrics, one window.
"""

import pytest

from guardrail.agents.web import current_rates
from guardrail.agents.windows import TABLE_NAME
from guardrail.agents.window_cells import (
    ChangelogRecordError,
    WindowCells,
    changelog_topic,
    decode_record,
    stale_before,
)
from guardrail.stream.events import window_key

KEY = b'["toxicity|model=m,model_version=v1,prompt_version=-",[1795429200.0,1795429499.9]]'
FIRST = b'{"total":1,"unsafe":0,"errors":0,"examples":[],"marks":{"live|in-82517a87|1":0}}'
LAST = (b'{"total":6,"unsafe":1,"errors":0,"examples":[{"case_id":"case-0","evidence_spans"'
        b':["idiot"]}],"marks":{"live|in-82517a87|1":3,"live|in-82517a87|0":1}}')
OTHER_KEY = b'["bias|model=m,model_version=v1,prompt_version=-",[1795429200.0,1795429499.9]]'
OTHER = (b'{"total":6,"unsafe":0,"errors":0,"examples":[],'
         b'"marks":{"live|in-82517a87|1":3,"live|in-82517a87|0":1}}')
NOW = 1795429300.0  # inside the captured window


def _cells():
    return WindowCells(window_seconds=300, expires_seconds=3600)


def test_a_captured_record_decodes_to_its_cell_and_counts():
    (window, start, end), counts = decode_record(KEY, LAST)
    assert window == "toxicity|model=m,model_version=v1,prompt_version=-"
    assert (start, end) == (1795429200.0, 1795429499.9)
    assert (counts.total, counts.unsafe, counts.errors, counts.rate) == (6, 1, 0, 1 / 6)
    assert decode_record(KEY, None) == ((window, start, end), None)  # a tombstone


def test_the_newest_record_of_a_cell_wins_and_rows_have_the_rates_shape():
    cells = _cells()
    for key, value in ((KEY, FIRST), (OTHER_KEY, OTHER), (KEY, LAST)):
        cells.apply(key, value)
    assert cells.rows(now=NOW) == [
        {"metric": "toxicity", "group": "model=m,model_version=v1,prompt_version=-", "unit": "turn",
         "window_start": "2026-11-23T10:20:00.000+00:00",
         "window_end": "2026-11-23T10:25:00.000+00:00",
         "seen": 6, "total": 6, "unsafe": 1, "errors": 0, "unsafe_rate": 1 / 6},
        {"metric": "bias", "group": "model=m,model_version=v1,prompt_version=-", "unit": "turn",
         "window_start": "2026-11-23T10:20:00.000+00:00",
         "window_end": "2026-11-23T10:25:00.000+00:00",
         "seen": 6, "total": 6, "unsafe": 0, "errors": 0, "unsafe_rate": 0.0}]
    assert [r["metric"] for r in cells.rows(metric="bias", now=NOW)] == ["bias"]
    assert (cells.records, cells.malformed) == (3, 0)


def test_group_rows_match_the_local_table_rows_for_the_same_cells():
    cells = _cells()
    cells.apply(KEY, LAST)
    key = window_key("toxicity", {"model": "m", "model_version": "v1", "prompt_version": "-"})
    table = type("Table", (), {"data": {
        (key, (1795429200.0, 1795429499.9)): {"total": 6, "unsafe": 1, "errors": 0}}})
    assert cells.rows(now=NOW) == current_rates(table)


def test_a_sampled_cell_shows_seen_beside_the_judged_counts():
    # Sampling: 24 messages seen, 6 judged; a cell from before sampling reads seen = total.
    sampled = LAST.replace(b'"errors":0,', b'"errors":0,"seen":24,')
    cells = _cells()
    cells.apply(KEY, sampled)
    cells.apply(OTHER_KEY, OTHER)
    rows = {r["metric"]: r for r in cells.rows(now=NOW)}
    assert (rows["toxicity"]["seen"], rows["toxicity"]["total"]) == (24, 6)
    assert rows["toxicity"]["unsafe_rate"] == 1 / 6  # over the judged, never the seen
    assert (rows["bias"]["seen"], rows["bias"]["total"]) == (6, 6)


def test_a_tombstone_deletes_the_cell():
    cells = _cells()
    cells.apply(KEY, LAST)
    cells.apply(OTHER_KEY, OTHER)
    cells.apply(KEY, None)
    assert [r["metric"] for r in cells.rows(now=NOW)] == ["bias"]


def test_expired_windows_are_dropped_as_the_table_drops_them():
    # Faust: a window expires once it ends at or before the start of the
    # window holding now - expires (here: windows of 300 s, expiry 3600 s).
    end = 1795429499.9
    limit = stale_before(end + 3600, 300, 3600)
    assert limit == 1795429200.0 < end  # 1 h after its end the cell is still shown ...
    cells = _cells()
    cells.apply(KEY, LAST)
    assert len(cells.rows(now=end + 3600)) == 1
    assert len(cells.rows(now=end + 3600.2)) == 0  # ... and gone once the next window starts
    assert len(cells.cells) == 1  # rows() filters; prune() forgets
    assert cells.prune(now=end + 3600.2) == 1 and cells.cells == {}


@pytest.mark.parametrize("key, value, reason", [
    (None, FIRST, "no key"),
    (b"toxicity|model=m", FIRST, "key is not JSON"),
    (b'"toxicity|model=m"', FIRST, "not [window key, [start, end]]"),
    (b'["toxicity|m",[1795429200.0]]', FIRST, "not [window key, [start, end]]"),
    (b'["toxicity|m",[1795429499.9,1795429200.0]]', FIRST, "no valid window range"),
    (b'["toxicity|m",[1e300,1e301]]', FIRST, "no valid window range"),
    (b'["toxicity|m",["a","b"]]', FIRST, "no valid window range"),
    (b'["toxicity",[1795429200.0,1795429499.9]]', FIRST, "no 'metric|' prefix"),
    (KEY, b"\xff\xfe", "value is not JSON"),
    (KEY, b"null", "value is not a JSON object"),
    (KEY, b"[1, 2]", "value is not a JSON object"),
    (KEY, b'{"total": "6"}', "non-negative integers"),
    (KEY, b'{"total": -1}', "non-negative integers"),
    (KEY, b'{"total": true}', "non-negative integers"),
    (KEY, b'{"total": 1, "unsafe": 1, "errors": 1}', "exceed total"),
    (KEY, b'{"total": 5, "seen": 4}', "total \\(judged\\) exceeds seen"),
    (KEY, b'{"total": 1, "seen": -1}', "non-negative integers"),
])
def test_records_that_are_no_window_cell_are_refused_with_the_reason(key, value, reason):
    with pytest.raises(ChangelogRecordError, match=reason.replace("[", r"\[").replace("|", r"\|")):
        decode_record(key, value)


def test_a_bad_record_is_counted_and_skipped_without_losing_the_cells():
    cells = _cells()
    cells.apply(KEY, LAST)
    cells.apply(KEY, b"{oops", where="window-changelog[1] offset 7")
    assert cells.malformed == 1
    assert cells.last_error.startswith("window-changelog[1] offset 7: value is not JSON")
    assert [r["total"] for r in cells.rows(now=NOW)] == [6]  # the last good value stands


def test_the_changelog_topic_is_named_as_faust_names_the_window_table_changelog():
    from guardrail.agents.app import build_app
    from guardrail.config.settings import load_settings

    runtime = build_app(load_settings(environ={}, app_id="fleet-x",
                                      judge_api_base="http://127.0.0.1:9/v1"))
    table = runtime.state["table"]
    assert table.name == TABLE_NAME
    assert table.changelog_topic.get_topic_name() == changelog_topic("fleet-x") \
        == "fleet-x-window-counts-changelog"


def test_a_session_cell_is_a_row_of_its_own_with_unit_session_in_both_views():
    """/rates (the group's rows and a worker's own) and ``guardrail rates`` show the
    unit of every cell: ``session`` for the cells of session judgments (the
    group label unit=session), ``turn`` for the rest; never summed together."""
    session_key = KEY.replace(b'prompt_version=-"', b'prompt_version=-,unit=session"')
    cells = _cells()
    cells.apply(KEY, LAST)
    cells.apply(session_key, OTHER)
    rows = cells.rows(now=NOW)
    assert [(r["group"], r["unit"], r["total"], r["unsafe"]) for r in rows] == [
        ("model=m,model_version=v1,prompt_version=-,unit=session", "session", 6, 0),
        ("model=m,model_version=v1,prompt_version=-", "turn", 6, 1)]
    labels = {"model": "m", "model_version": "v1", "prompt_version": "-"}
    bounds = (1795429200.0, 1795429499.9)
    table = type("Table", (), {"data": {
        (window_key("toxicity", labels), bounds): {"total": 6, "unsafe": 1, "errors": 0},
        (window_key("toxicity", {**labels, "unit": "session"}), bounds):
            {"total": 6, "unsafe": 0, "errors": 0}}})
    assert current_rates(table) == rows
