import json

from guardrail.batch.run import run_batch
from guardrail.formats.reader import default_case_id, position_id, read_cases
from guardrail.stream.envelope import Source, decode_input


def test_object_array_and_jsonl(tmp_path):
    obj = tmp_path / "one.json"
    obj.write_text('{"case_id": "a", "output": "x"}')
    arr = tmp_path / "many.json"
    arr.write_text('[{"case_id": "a", "output": "x"}, {"case_id": "b", "output": "y"}]')
    lines = tmp_path / "many.jsonl"
    lines.write_text('{"case_id": "a", "output": "x"}\n\n{"case_id": "b", "output": "y"}\n')
    for path, count in ((obj, 1), (arr, 2), (lines, 2)):
        cases, problems = read_cases(path)
        assert len(cases) == count and not problems


def test_bad_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"case_id": "a", "output": "x"}\n'
                     b'{broken json\n'
                     b'["not", "an", "object"]\n'
                     b'{"case_id": "d", "output": "\xff\xfe bad utf8"}\n'
                     b'{"case_id": "e", "output": 5}\n'
                     b'{"case_id": "f", "output": "fine"}\n')
    cases, problems = read_cases(path)
    assert [c.case_id for _, c in cases] == ["a", "f"]
    reasons = {p.where: p.reason for p in problems}
    assert set(reasons) == {"line 2", "line 3", "line 4", "line 5"}
    assert "invalid JSON" in reasons["line 2"]
    assert "JSON object" in reasons["line 3"]
    assert "UTF-8" in reasons["line 4"]
    assert "output" in reasons["line 5"]


def test_limit_counts_valid_cases(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join('{"case_id": "%d", "output": "x"}' % i for i in range(10)))
    cases, _ = read_cases(path, limit=3)
    assert [c.case_id for _, c in cases] == ["0", "1", "2"]


def test_broken_array_is_one_clear_problem(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"output": "x"},')
    cases, problems = read_cases(path)
    assert not cases and "invalid JSON array" in problems[0].reason


def test_a_file_case_without_case_id_is_named_by_its_line_or_item():
    assert default_case_id(None, position_id("line 9", 4)) == "case-9"
    assert default_case_id(None, position_id("item 2", 2)) == "case-2"
    assert position_id("built in code", 5) == "case-5"
    assert default_case_id(b"order-1", "case-9") == "order-1"


async def test_batch_and_stream_name_a_case_without_case_id_by_one_rule(make_settings, tmp_path):
    # Line 2 is blank: the name follows the file's line (3), not the case's index (2).
    path = tmp_path / "cases.jsonl"
    path.write_text('{"case_id": "a", "output": "fine"}\n\n{"output": "fine too"}\n')
    cases, _ = read_cases(path)
    out = tmp_path / "out"
    summary = await run_batch(cases, settings=make_settings(), output_dir=out, report="eval")
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "case-3.json", "summary.json"]
    report = json.loads((out / "case-3.json").read_text())
    assert report["case_id"] == "case-3" == default_case_id(None, position_id("line 3", 2))
    assert summary.cases == 2
    # The stream applies the same function: no key, so the coordinates.
    raw = b'{"output": "fine too"}'
    source = Source("in", 0, 42)
    streamed = decode_input(raw, max_bytes=1000, source=source)
    assert streamed.case.case_id == "in/0/42" == default_case_id(None, source.coordinates)
