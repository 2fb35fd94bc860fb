"""The judge's agreement with reviewers and the corrected unsafe rate, against
figures worked out by hand (guardrail.stream.agreement, no Kafka)."""

from __future__ import annotations

import pytest
from support.records import T0, agreement_tracker, feed_labels, label_record, polite_judge_labels

from guardrail.review import LabelRecord
from guardrail.stream.agreement import (Confusion, agreement_cells, agreement_row, cell_of,
                                        corrected_rate, effective_n, rogan_gladen, wilson)

def _fixed_set() -> list[LabelRecord]:
    """UNSAFE verdicts reviewed at rate 1 (weight 1): 8 unsafe, 2 safe. SAFE
    verdicts reviewed at rate 0.1 (weight 10): 2 unsafe, 18 safe. Three judge
    errors (2 called unsafe, 1 safe)."""
    rows = ([("UNSAFE", "unsafe", 1.0)] * 8 + [("UNSAFE", "safe", 1.0)] * 2
            + [("SAFE", "unsafe", 0.1)] * 2 + [("SAFE", "safe", 0.1)] * 18
            + [(None, "unsafe", 1.0)] * 2 + [(None, "safe", 1.0)])
    return [label_record(i, *row) for i, row in enumerate(rows)]


def test_precision_recall_and_specificity_weigh_the_safe_slice_by_its_rate():
    confusion = Confusion.of(_fixed_set())
    assert (confusion.reviewed, confusion.judged_reviews, confusion.errors,
            confusion.errors_unsafe) == (33, 30, 3, 2)
    assert (confusion.unsafe_verdicts, confusion.safe_verdicts) == (10, 20)
    precision = confusion.precision()
    # 8 of 10 UNSAFE verdicts confirmed; equal weights: n_eff = 10.
    assert precision.value == pytest.approx(0.8) and precision.n_eff == pytest.approx(10)
    assert (precision.low, precision.high) == pytest.approx((0.490162, 0.943318), abs=1e-6)
    assert precision.reviews == 10
    recall = confusion.recall()
    # Reviewer-unsafe: 8 caught at weight 1, 2 missed at weight 10 -> 8 / 28, not 8 / 10.
    assert recall.value == pytest.approx(8 / 28)
    # n_eff = (8 + 20)^2 / (8 * 1 + 2 * 100) = 784 / 208
    assert recall.n_eff == pytest.approx(784 / 208)
    assert (recall.low, recall.high) == pytest.approx((0.055189, 0.732559), abs=1e-6)
    specificity = confusion.specificity()
    assert specificity.value == pytest.approx(180 / 182)
    assert specificity.n_eff == pytest.approx(182 ** 2 / 1802)
    assert (specificity.low, specificity.high) == pytest.approx((0.809488, 0.999476), abs=1e-6)


def test_judge_errors_count_apart_and_never_in_precision_or_recall():
    with_errors = Confusion.of(_fixed_set())
    without = Confusion.of([lab for lab in _fixed_set() if lab.judge_verdict is not None])
    assert with_errors.precision() == without.precision()
    assert with_errors.recall() == without.recall()
    only_errors = Confusion.of([label_record(1, None, "unsafe", 1.0)])
    assert only_errors.precision() is None and only_errors.recall() is None
    assert only_errors.reviewed == 1 and only_errors.judged_reviews == 0


def test_wilson_and_effective_size_basics():
    assert effective_n([1, 1, 1, 1]) == 4
    assert effective_n([10, 10]) == pytest.approx(2)  # equal weights: the count itself
    assert effective_n([1, 10]) == pytest.approx(121 / 101)
    assert effective_n([]) == 0
    low, high = wilson(0.0, 10)
    assert low == 0 and high == pytest.approx(0.277532, abs=1e-6)
    assert wilson(0.5, 0) == (0.0, 1.0)


def test_rogan_gladen_by_hand_and_clipped():
    # se = 8/28, sp = 180/182, p_obs = 0.2: (0.2 - 1/91) / (25/91) = 17.2 / 25
    assert rogan_gladen(0.2, 8 / 28, 180 / 182) == pytest.approx(0.688)
    assert rogan_gladen(0.0, 0.9, 0.9) == 0.0  # (0 - 0.1) / 0.8 < 0: clipped
    assert rogan_gladen(0.97, 0.9, 0.9) == 1.0  # (0.97 - 0.1) / 0.8 > 1: clipped
    assert rogan_gladen(0.3, 0.4, 0.6) is None  # no better than chance


def test_corrected_rate_value_interval_and_determinism():
    confusion = Confusion.of(_fixed_set())
    corrected = corrected_rate(20, 100, confusion, min_reviews=10)
    assert corrected.value == pytest.approx(0.688) and corrected.note is None
    # Two missed insults at weight 10 leave the recall on n_eff = 3.8 reviews: over
    # 2.5 % of the draws have se* + sp* - 1 <= 0, so the interval is all of [0, 1].
    assert (corrected.low, corrected.high) == (0.0, 1.0)
    assert corrected_rate(20, 100, confusion, min_reviews=10) == corrected  # seeded
    assert corrected.as_dict() == {"value": corrected.value, "low": corrected.low,
                                   "high": corrected.high}
    clipped = corrected_rate(0, 100, confusion, min_reviews=10)
    assert clipped.value == 0.0 and clipped.low == 0.0 and clipped.high > 0


def _balanced(scale: int) -> Confusion:
    """Reviews at rate 1: se = 0.8, sp = 0.9, scale x (4 + 1 + 9 + 1) reviews."""
    confusion = Confusion()
    for verdict, label, n in (("UNSAFE", "unsafe", 4), ("SAFE", "unsafe", 1),
                              ("SAFE", "safe", 9), ("UNSAFE", "safe", 1)):
        for _ in range(n * scale):
            confusion.add(verdict, label, 1.0)
    return confusion


def test_the_interval_narrows_with_more_reviews_and_more_traffic():
    few, many = _balanced(2), _balanced(20)
    # (0.3 + 0.9 - 1) / (0.8 + 0.9 - 1) = 0.2 / 0.7
    narrow = corrected_rate(3000, 10000, many, min_reviews=10)
    wide = corrected_rate(3000, 10000, few, min_reviews=10)
    assert narrow.value == pytest.approx(0.2 / 0.7) == wide.value
    assert wide.low <= wide.value <= wide.high and narrow.low <= narrow.value <= narrow.high
    assert (wide.high - wide.low) > 1.5 * (narrow.high - narrow.low)
    # Less traffic, same reviews: wider too (the bootstrap draws both).
    thin = corrected_rate(30, 100, many, min_reviews=10)
    assert (thin.high - thin.low) > (narrow.high - narrow.low)


def test_no_correction_without_enough_reviews_and_it_says_why():
    confusion = Confusion.of(_fixed_set())  # 10 UNSAFE and 20 SAFE verdicts reviewed
    short = corrected_rate(20, 100, confusion, min_reviews=11)
    assert short.value is None and short.as_dict() is None
    assert short.note == "not enough reviews: 10 of 11 UNSAFE verdicts reviewed"
    both = corrected_rate(20, 100, confusion, min_reviews=21)
    assert both.note == ("not enough reviews: 10 of 21 UNSAFE verdicts and 20 of 21 SAFE "
                         "verdicts reviewed")
    chance = Confusion()
    for verdict, label, n in (("UNSAFE", "unsafe", 3), ("SAFE", "unsafe", 7),
                              ("SAFE", "safe", 5), ("UNSAFE", "safe", 5)):
        for _ in range(n):
            chance.add(verdict, label, 1.0)
    result = corrected_rate(5, 10, chance, min_reviews=5)
    assert result.value is None and "no better than chance" in result.note
    nobody_unsafe = Confusion()
    for verdict in ("UNSAFE", "SAFE") * 10:
        nobody_unsafe.add(verdict, "safe", 1.0)
    assert "sensitivity is unknown" in corrected_rate(1, 10, nobody_unsafe).note


def test_cells_group_as_the_windows_do_and_rows_match_observed_rates():
    labels = _fixed_set() + [
        label_record(100, "UNSAFE", "unsafe", 1.0, model="m", model_version="v2", extra="x"),
        label_record(101, "UNSAFE", "unsafe", 1.0, ms=T0 + 300_000),
        label_record(102, "SAFE", "safe", 0.5, metric="bias")]
    key = cell_of(labels[0], window_seconds=300, group_labels=("model", "model_version",
                                                                  "prompt_version"))
    assert key.group == "model=m,model_version=v1,prompt_version=-"
    assert key.start == 1_700_000_100.0 and key.end == key.start + 300
    cells = agreement_cells(labels, window_seconds=300,
                            group_labels=("model", "model_version", "prompt_version"))
    assert {(k.metric, k.group, k.start - key.start) for k in cells} == {
        ("toxicity", "model=m,model_version=v1,prompt_version=-", 0),
        ("toxicity", "model=m,model_version=v2,prompt_version=-", 0),
        ("toxicity", "model=m,model_version=v1,prompt_version=-", 300),
        ("bias", "model=m,model_version=v1,prompt_version=-", 0)}
    observed = {"metric": "toxicity", "group": key.group, "window_start": key.window_start,
                "total": 104, "unsafe": 20, "errors": 4}
    row = agreement_row(key, cells[key], observed=observed, min_reviews=20,
                        corrected_min_reviews=10)
    assert row["window_start"] == "2023-11-14T22:15:00.000+00:00"
    assert row["window_end"] == "2023-11-14T22:20:00.000+00:00"
    assert (row["reviewed"], row["reviewed_verdicts"], row["enough_reviews"]) == (
        33, {"unsafe": 10, "safe": 20, "error": 3}, True)
    assert row["precision"]["value"] == pytest.approx(0.8)
    assert row["recall"]["value"] == pytest.approx(8 / 28)
    assert (row["observed_judged"], row["observed_unsafe"]) == (100, 20)
    assert row["observed_unsafe_rate"] == pytest.approx(0.2)
    assert row["corrected_unsafe_rate"]["value"] == pytest.approx(0.688)
    assert row["corrected_note"] is None
    assert row["confusion"]["fn"] == {"count": 2, "weight": 20.0}
    lonely = agreement_row(key, cells[key], observed=None, min_reviews=40,
                           corrected_min_reviews=10)
    assert lonely["corrected_unsafe_rate"] is None and lonely["enough_reviews"] is False
    assert lonely["corrected_note"] == "no observed rate for this window"


def test_a_rate_outside_zero_one_is_refused():
    with pytest.raises(ValueError):
        Confusion().add("SAFE", "safe", 0.0)


# -- the worker's tracker (guardrail.agents.agreement), fed by hand: no Kafka --------------

def test_the_tracker_alerts_once_per_incident_and_exports_gauges(tmp_path):
    now = [T0 / 1000 + 60]
    window_start = "2023-11-14T22:15:00.000+00:00"
    group = "model=m,model_version=v1,prompt_version=-"
    rates = [{"metric": "toxicity", "group": group, "window_start": window_start,
              "total": 40, "unsafe": 16, "errors": 0}]
    tracker, dispatcher, telemetry = agreement_tracker(tmp_path, now, rates=lambda: rates)
    feed_labels(tracker, [], caught_up=True)  # an empty topic: caught up at once
    assert tracker.live and not dispatcher.sent
    feed_labels(tracker, polite_judge_labels(0, 1, ms=T0))  # precision 5/6: above the 0.7 floor
    assert not dispatcher.sent
    feed_labels(tracker, polite_judge_labels(100, 9, ms=T0 + 1000))  # now 10 / 20 UNSAFE confirmed
    assert len(dispatcher.sent) == 1
    alert = dispatcher.sent[0]
    assert alert["kind"] == "agreement" and alert["metric"] == "toxicity"
    assert alert["group"] == {"model": "m", "model_version": "v1", "prompt_version": "-"}
    assert alert["window"] == {"start": window_start, "end": "2023-11-14T22:20:00.000+00:00"}
    assert alert["figures"]["precision"]["value"] == pytest.approx(0.5)
    assert alert["figures"]["recall"]["value"] == 1.0
    assert alert["floors"] == {"precision": 0.7, "recall": 0.7, "min_reviews": 10}
    assert alert["reasons"][0].startswith("judge precision 50.0% below the floor 70.0% "
                                          "(20 reviews")
    assert [e["judge_verdict"] for e in alert["examples"]] == ["UNSAFE"] * 3
    # The same incident goes on, in this window and the next: no second alert.
    feed_labels(tracker, polite_judge_labels(200, 9, ms=T0 + 2000))
    feed_labels(tracker, polite_judge_labels(300, 9, ms=T0 + 300_000))
    assert len(dispatcher.sent) == 1
    metrics = telemetry.render().decode()
    # The gauges show the newest window with reviews (the second: 5 of 14).
    assert (f'guardrail_judge_precision{{group="{group}",metric="toxicity"}} '
            f'{5 / 14!r}') in metrics
    assert f'guardrail_reviewed_labels{{group="{group}",metric="toxicity"}} 19.0' in metrics
    assert 'guardrail_agreement_alerts_total{metric="toxicity"} 1.0' in metrics
    rows = tracker.rows()
    assert [r["window_start"] for r in rows] == ["2023-11-14T22:20:00.000+00:00", window_start]
    first = rows[1]
    assert first["reviewed"] == 49 and first["observed_unsafe_rate"] == pytest.approx(0.4)
    # se = 15/15 = 1, sp = 15/34: (0.4 + 15/34 - 1) / (15/34) = 1 - 0.6 * 34/15 < 0 -> 0
    assert first["corrected_unsafe_rate"]["value"] == 0.0
    assert rows[0]["corrected_note"] == "no observed rate for this window"
    # Both windows expire: cells, labels and gauges go.
    now[0] += 3600 + 600
    tracker.after_poll(caught_up=True)
    assert tracker.rows() == [] and not tracker.fold.by_key
    assert "guardrail_judge_precision{" not in telemetry.render().decode()


def test_labels_read_while_catching_up_arm_the_cooldown_without_alerting(tmp_path):
    now = [T0 / 1000 + 60]
    tracker, dispatcher, _ = agreement_tracker(tmp_path, now)
    feed_labels(tracker, polite_judge_labels(0, 10, ms=T0), caught_up=False)  # history: already bad
    assert not dispatcher.sent and not tracker.live
    feed_labels(tracker, [], caught_up=True)
    assert tracker.live and not dispatcher.sent
    # The incident goes on: alerted before.
    feed_labels(tracker, polite_judge_labels(100, 10, ms=T0))
    assert not dispatcher.sent
    other = [lab.model_copy(update={"labels": {"model": "other"}})
             for lab in polite_judge_labels(500, 10, ms=T0)]
    feed_labels(tracker, other)  # another group: its own incident
    assert [a["group"]["model"] for a in dispatcher.sent] == ["other"]


def test_a_withdrawn_label_leaves_its_cell(tmp_path):
    now = [T0 / 1000 + 60]
    tracker, _, _ = agreement_tracker(tmp_path, now)
    labels = polite_judge_labels(0, 0, ms=T0)
    feed_labels(tracker, labels)
    assert tracker.rows()[0]["reviewed"] == 10
    tracker.fold.apply(labels[0].key(), None, where="test")  # a tombstone
    tracker.after_poll(caught_up=True)
    assert tracker.rows()[0]["reviewed"] == 9


def test_the_dashboard_panel_shows_figures_or_why_not_escaped():
    from guardrail.stream.dashboard import PageContext, build_dashboard, render_page
    from guardrail.stream.dashboard.agreement import build_agreement

    key = cell_of(_fixed_set()[0], window_seconds=300,
                  group_labels=("model", "model_version", "prompt_version"))
    enough = agreement_row(key, Confusion.of(_fixed_set()), min_reviews=20,
                           corrected_min_reviews=10,
                           observed={"total": 100, "unsafe": 20, "errors": 0})
    few = Confusion.of([label_record(1, "UNSAFE", "unsafe", 1.0)] * 3)
    scarce_key = key.__class__("toxicity", "model=<b>x</b>,model_version=v2", key.start,
                               key.end)
    scarce = agreement_row(scarce_key, few, observed=None, min_reviews=20,
                           corrected_min_reviews=10)
    problems: list[str] = []
    panel = build_agreement([enough, scarce, {"metric": "x"}], version_label="model_version",
                            problems=problems)
    assert len(panel.rows) == 2 and problems[0].startswith("agreement row 3 skipped")
    html = render_page(build_dashboard([], [], window_seconds=300,
                                       version_label="model_version", agreement=panel),
                       PageContext(refresh_seconds=0))
    assert "Judge vs reviewers" in html and 'href="/agreement"' in html
    assert "80.0% <span class=\"sub\">(49.0%–94.3%)</span>" in html  # precision
    assert "28.6%" in html and "68.8%" in html  # recall; corrected beside observed 20.0%
    assert "not enough reviews: 3 of 20" in html
    assert "no observed rate for this window" in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    off = render_page(build_dashboard([], [], window_seconds=300,
                                      version_label="model_version"), PageContext())
    assert "Judge vs reviewers" not in off and "/agreement" not in off


def test_corrected_rates_keep_within_a_bootstrap_budget_per_call(tmp_path, monkeypatch):
    import guardrail.agents.agreement as live

    now = [T0 / 1000 + 60]
    group = "model=m,model_version=v1,prompt_version=-"
    rates = [{"metric": "toxicity", "group": group,
              "window_start": "2023-11-14T22:15:00.000+00:00", "total": 40, "unsafe": 8,
              "errors": 0}]
    tracker, _, _ = agreement_tracker(tmp_path, now, rates=lambda: rates)
    feed_labels(tracker, polite_judge_labels(0, 0, ms=T0))  # 5 + 5 reviews: se = sp = 1
    monkeypatch.setattr(live, "BOOTSTRAP_BUDGET_SECONDS", 0.0)
    assert tracker.rows()[0]["corrected_note"].startswith("corrected rate not computed yet")
    monkeypatch.setattr(live, "BOOTSTRAP_BUDGET_SECONDS", 10.0)
    first = tracker.rows()[0]["corrected_unsafe_rate"]
    assert first["value"] == pytest.approx(0.2)
    rates[0] = {**rates[0], "total": 50, "unsafe": 20}
    monkeypatch.setattr(live, "BOOTSTRAP_BUDGET_SECONDS", 0.0)
    assert tracker.rows()[0]["corrected_unsafe_rate"] == first  # the previous one, for now
    monkeypatch.setattr(live, "BOOTSTRAP_BUDGET_SECONDS", 10.0)
    assert tracker.rows()[0]["corrected_unsafe_rate"]["value"] == pytest.approx(0.4)


def test_the_rates_table_shows_agreement_columns_beside_the_windows():
    from guardrail.cli.rates import rates_table
    from guardrail.stream.agreement import agreement_rows

    groups = ("model", "model_version", "prompt_version")
    key = cell_of(_fixed_set()[0], window_seconds=300, group_labels=groups)
    rates = [{"metric": "toxicity", "group": key.group, "window_start": key.window_start,
              "window_end": key.window_end, "seen": 100, "total": 100, "unsafe": 20,
              "errors": 0, "unsafe_rate": 0.2},
             {"metric": "bias", "group": key.group, "window_start": key.window_start,
              "window_end": key.window_end, "seen": 100, "total": 100, "unsafe": 0,
              "errors": 0, "unsafe_rate": 0.0}]
    rows = agreement_rows(_fixed_set(), rates, window_seconds=300, group_labels=groups,
                          min_reviews=20, corrected_min_reviews=10)
    assert len(rows) == 1 and rows[0]["observed_unsafe"] == 20
    assert agreement_rows(_fixed_set(), rates, window_seconds=300, group_labels=groups,
                          min_reviews=20, corrected_min_reviews=10, after=key.end) == []
    lines = rates_table(rates, rows).splitlines()
    assert lines[0].split()[-4:] == ["reviewed", "precision", "recall", "corrected"]
    corrected = rows[0]["corrected_unsafe_rate"]
    assert lines[1].split()[-5:] == ["33", "80.0%", "28.6%", "68.8%",
                                     f"({corrected['low']:.1%}-{corrected['high']:.1%})"]
    assert lines[2].split()[-4:] == ["0", "-", "-", "-"]
    assert "reviewed" not in rates_table(rates)  # no labels: the table as before
