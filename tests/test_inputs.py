from guardrail.inputs import read_cases


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
