import pytest

from guardrail.errors import RubricError
from guardrail.models import MetricRubric
from guardrail.rubrics import default_metrics, load_rubric_dir, merge_metrics, parse_metric


def test_shipped_defaults_are_bias_then_toxicity_on_output():
    metrics = default_metrics()
    assert [m.name for m in metrics] == ["bias", "toxicity"]
    assert all(m.item_fields == ("output",) for m in metrics)
    assert all(m.goal and m.violations and m.non_violations for m in metrics)


def test_user_metric_overrides_by_name_in_place_and_new_ones_append():
    custom = MetricRubric(name="toxicity", goal="Stricter toxicity")
    extra = MetricRubric(name="prompt_injection", goal="Detect leaked system prompts")
    merged = merge_metrics(default_metrics(), [custom, extra])
    assert [m.name for m in merged] == ["bias", "toxicity", "prompt_injection"]
    assert merged[1].goal == "Stricter toxicity"


@pytest.mark.parametrize("data, fragment", [
    ({"name": "x"}, "field 'goal' is required"),
    ({"name": "x", "goal": "   "}, "field 'goal'"),
    ({"name": "x", "goal": "g", "item_fields": ["output", "metadata"]},
     "unknown item field 'metadata'"),
    ({"name": "x", "goal": "g", "item_fields": []}, "field 'item_fields'"),
    ({"name": "bad name!", "goal": "g"}, "field 'name'"),
    ({"name": "x", "goal": "g", "severity": 3}, "unknown field 'severity'"),
])
def test_invalid_rubric_message_names_the_field(data, fragment):
    with pytest.raises(RubricError) as info:
        parse_metric(data, source="custom.yaml")
    assert fragment in str(info.value)
    assert str(info.value).startswith("custom.yaml:")


def test_user_rubric_directory_and_duplicate_names(tmp_path):
    (tmp_path / "a.yaml").write_text("name: pii\ngoal: Detect personal data\n")
    (tmp_path / "b.json").write_text('{"name": "legal", "goal": "No legal advice",'
                                     ' "item_fields": ["output", "input"]}')
    loaded = load_rubric_dir(tmp_path)
    assert [m.name for m in loaded] == ["pii", "legal"]
    assert loaded[1].item_fields == ("output", "input")
    (tmp_path / "c.yaml").write_text("name: pii\ngoal: again\n")
    with pytest.raises(RubricError, match="duplicate metric name 'pii'"):
        load_rubric_dir(tmp_path)


def test_unreadable_rubric_file_is_a_clear_error(tmp_path):
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(RubricError, match="broken.yaml: cannot read rubric"):
        load_rubric_dir(tmp_path)


def test_missing_directory(tmp_path):
    with pytest.raises(RubricError, match="does not exist"):
        load_rubric_dir(tmp_path / "nope")
