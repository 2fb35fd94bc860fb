"""Keys that route judgment events and window counts, and tumbling window bounds."""

import pytest

from guardrail.agents.windows import window_bounds
from guardrail.stream.processing import partition_key, table_key

V1 = {"model": "m", "model_version": "v1", "prompt_version": "p1"}
V2 = {**V1, "model_version": "v2"}


def test_versions_of_a_group_share_a_partition_but_not_a_table_key():
    assert partition_key("toxicity", V1, "model_version") == \
        partition_key("toxicity", V2, "model_version")
    assert table_key("toxicity", V1) != table_key("toxicity", V2)


def test_other_groups_and_metrics_get_other_keys():
    other_model = {**V1, "model": "n"}
    other_prompt = {**V1, "prompt_version": "p2"}
    keys = {partition_key("toxicity", V1, "model_version"),
            partition_key("toxicity", other_model, "model_version"),
            partition_key("toxicity", other_prompt, "model_version"),
            partition_key("pii", V1, "model_version")}
    assert len(keys) == 4
    assert len({table_key("toxicity", V1), table_key("pii", V1),
                table_key("toxicity", other_model)}) == 3


def test_version_label_is_configurable():
    a = {"model": "m", "release": "r1"}
    b = {"model": "m", "release": "r2"}
    assert partition_key("toxicity", a, "release") == partition_key("toxicity", b, "release")
    assert partition_key("toxicity", a, "model_version") != \
        partition_key("toxicity", b, "model_version")


def test_missing_labels_still_make_distinct_keys():
    dashed = {"model": "-", "model_version": "v1", "prompt_version": "-"}
    assert table_key("toxicity", dashed) != table_key("toxicity", V1)
    assert table_key("toxicity", dashed) == table_key("toxicity", dict(dashed))


@pytest.mark.parametrize("size", [60.0, 300.0, 3600.0, 0.5])
def test_window_bounds_align_to_the_window_size(size):
    for timestamp in (1714564923.25, 1714564800.0, 0.0, 12.75):
        start, end = window_bounds(timestamp, size)
        assert start <= timestamp < end
        assert end - start == pytest.approx(size)
        assert start / size == pytest.approx(round(start / size))


def test_window_bounds_examples():
    assert window_bounds(1714564923.5, 300) == (1714564800, 1714565100)
    # A timestamp on a boundary opens the next window.
    assert window_bounds(1714565100.0, 300) == (1714565100, 1714565400)
    # Every moment of one window maps to the same bounds.
    assert {window_bounds(1714564800 + s, 300) for s in (0, 1, 150, 299.999)} == \
        {(1714564800, 1714565100)}
