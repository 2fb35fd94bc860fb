"""The threshold curve and the recommendation, on probabilities worked out by hand."""

import pytest

from guardrail.calibration.thresholds import (GRID, Judged, Target, cuts, curve, display_rows,
                                              point_at, recommend)

# unsafe-labelled: 0.95, 0.7, 0.4 and one failed judgment;
# safe-labelled: 0.68, 0.3, 0.1 and one failed judgment.
CASES = [Judged("unsafe", 0.95), Judged("unsafe", 0.7), Judged("unsafe", 0.4),
         Judged("unsafe", None), Judged("safe", 0.68), Judged("safe", 0.3),
         Judged("safe", 0.1), Judged("safe", None)]


def test_the_confusion_matrix_at_a_threshold():
    at = point_at(0.7, CASES)  # UNSAFE when P >= 0.7: 0.95 and 0.7
    assert (at.tp, at.fp, at.fn, at.tn, at.errors, at.cases) == (2, 0, 2, 3, 2, 8)
    assert (at.precision, at.recall, at.accuracy) == (1.0, 0.5, 5 / 8)
    assert at.f1 == pytest.approx(2 / 3)
    below = point_at(0.69, CASES)  # 0.68 is not flagged yet
    assert (below.tp, below.fp) == (2, 0)
    assert point_at(0.68, CASES).fp == 1


def test_a_failed_judgment_is_wrong_at_every_threshold():
    for point in curve(CASES):
        assert point.errors == 2 and point.fn >= 1  # the failed unsafe case is never caught
        assert point.accuracy <= 6 / 8
        assert point.recall is None or point.recall <= 3 / 4
    nothing_flagged = point_at(0.99, CASES)
    assert nothing_flagged.precision is None and nothing_flagged.recall == 0.0
    assert nothing_flagged.f1 == 0.0


def test_cuts_are_every_probability_and_the_grid_rounded_down_never_to_zero():
    found = cuts([Judged("unsafe", 0.70004), Judged("safe", 0.00001), Judged("safe", None)])
    assert 0.7 in found and 0.0001 in found and set(GRID) <= set(found)
    assert found == sorted(found) and min(found) > 0
    # Rounding down keeps the case on the side it was measured on.
    assert point_at(0.7, [Judged("unsafe", 0.70004)]).tp == 1
    assert 0.33 in cuts(CASES, extra=[0.33])


def test_precision_target_takes_the_best_recall_among_thresholds_reaching_it():
    points = curve(CASES)
    perfect = [p.threshold for p in points if p.precision == 1.0 and p.recall == 0.5]
    assert perfect == [0.7]  # only 0.7 keeps both 0.95 and 0.7 above 0.68
    choice = recommend(points, Target.parse("precision=1.0"))
    assert choice.point.threshold == 0.7 and choice.reason is None
    # A lower bar admits 0.4: 3 caught for 1 false alarm, precision 0.75.
    assert recommend(points, Target.parse("precision=0.75")).point.threshold == 0.4


def test_recall_target_takes_the_best_precision_then_the_highest_threshold():
    points = curve(CASES)
    choice = recommend(points, Target.parse("recall=0.75"))
    # 0.35 and 0.4 flag the same cases (precision 3/4); the higher one is chosen.
    assert choice.point.threshold == 0.4 and choice.point.precision == 0.75
    assert recommend(points, Target.parse("recall=0.5")).point.threshold == 0.7


def test_accuracy_target_breaks_ties_nearest_the_default():
    points = curve(CASES)
    best = max(p.accuracy for p in points)
    tied = sorted({p.threshold for p in points if p.accuracy == best})
    assert best == 5 / 8 and 0.4 in tied and 0.7 in tied
    assert recommend(points, Target()).point.threshold == 0.4  # 0.1 from 0.5, not 0.2
    # When 0.5 itself is among the best, nothing moves.
    easy = [Judged("unsafe", 0.9), Judged("safe", 0.1)]
    assert recommend(curve(easy), Target.parse("accuracy")).point.threshold == 0.5


def test_an_unreachable_target_recommends_nothing_and_says_why():
    points = curve(CASES)
    choice = recommend(points, Target.parse("recall=1"))  # the failed unsafe case
    assert choice.point is None
    assert choice.reason == ("recall=1 is not reached at any threshold: the best recall is "
                             "0.750 (at 0.4)")
    inverted = curve([Judged("unsafe", 0.2), Judged("safe", 0.9)])
    choice = recommend(inverted, Target.parse("precision=0.9"))
    assert choice.point is None and "best precision is 0.500" in choice.reason
    no_unsafe = curve([Judged("safe", 0.2), Judged("safe", 0.6)])
    assert "no unsafe cases" in recommend(no_unsafe, Target.parse("recall=0.9")).reason


@pytest.mark.parametrize("text", ["f1", "precision", "precision=0", "recall=1.5",
                                  "recall=high", "accuracy=0.9", ""])
def test_targets_that_make_no_sense_are_refused(text):
    with pytest.raises(ValueError):
        Target.parse(text)


def test_targets_read_and_print_alike():
    assert str(Target.parse(" Precision=0.90 ")) == "precision=0.9"
    assert str(Target.parse("recall=1")) == "recall=1"
    assert Target.parse("accuracy") == Target()


def test_display_rows_mark_the_recommended_and_configured_thresholds():
    points = curve(CASES, extra=[0.62])
    rows = display_rows(points, recommended=0.7, configured=0.62)
    assert [p.threshold for p, _ in rows] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.62, 0.7, 0.8,
                                              0.9]
    marks = {p.threshold: mark for p, mark in rows}
    assert marks[0.7] == "recommended" and marks[0.62] == "configured" and marks[0.5] == ""
    same = display_rows(points, recommended=0.5, configured=0.5)
    assert dict((p.threshold, m) for p, m in same)[0.5] == "recommended = configured"
