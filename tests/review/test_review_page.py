"""The review page's HTML (guardrail.review.page): everything judged escaped,
evidence marked in place, bidi controls shown and inert, no script."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from guardrail.review.page import Viewer, highlight, render_empty, render_item, render_login
from guardrail.review.queue import Remaining, ReviewQueue
from guardrail.review.records import ReviewItem, ReviewMetric

EVIL = '<script>alert(1)</script> you idiot "><img src=x onerror=alert(2)> &amp; \u202eevil'


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


def test_spans_are_marked_in_place_and_every_piece_is_escaped():
    html, found = highlight(EVIL, [("toxicity", "idiot"), ("toxicity", '"><img src=x'),
                                   ("bias", "not there")])
    assert found == {"idiot", '"><img src=x'}
    assert "<script" not in html and "<img" not in html
    assert ('<mark title="evidence for toxicity">&quot;&gt;&lt;img src=x</mark>'
            ' onerror=alert(2)&gt;') in html
    assert "&amp;amp;" in html  # the text's own "&amp;" shows as typed
    assert re.search(r'<span class="ctl" title="U\+202E RIGHT-TO-LEFT OVERRIDE">RLO</span>evil',
                     html)
    assert "\u202e" not in html
    assert {tag for tag, _ in _tags(html)} == {"mark", "span"}


def test_overlapping_spans_of_two_metrics_become_one_mark():
    html, _ = highlight("all women are idiots", [("bias", "all women are"),
                                                 ("toxicity", "are idiots")])
    assert html == '<mark title="evidence for bias, toxicity">all women are idiots</mark>'


def _offer(verdict="UNSAFE"):
    queue = ReviewQueue(lease_seconds=60)
    metric = ReviewMetric(name='tox"ic', goal="<b>goal</b>", violations=("<i>v</i>",),
                          rubric_version="r", verdict=verdict, slice="unsafe", rate=1.0,
                          error=None if verdict else "judge said <nonsense>",
                          evidence_spans=("idiot", "gone"))
    item = ReviewItem(case_id='c"1<', fields={"output": EVIL, "input": "</textarea>"},
                      metrics=(metric,), judge_model="m<", event_time_ms=1,
                      labels={"model": "<x>"})
    queue.items.apply(item.key(), item.encode(), where="test")
    return queue.next_for("ana")


def test_the_item_page_holds_no_markup_from_the_item_and_no_script():
    html = render_item(_offer(), Viewer("an<a", "tok\"en"), Remaining(3, 1), flash="<b>")
    tags = _tags(html)
    assert not [t for t, _ in tags if t in ("script", "img", "i", "textarea", "iframe")]
    assert "&lt;b&gt;goal&lt;/b&gt;" in html and '<p class="flash" role="status">&lt;b&gt;' in html
    assert "signed in as <b>an&lt;a</b>" in html
    assert not [a for _, attrs in tags for a in attrs if a.startswith("on")]
    inputs = {attrs["name"]: attrs for t, attrs in tags if t == "input" and "name" in attrs}
    assert inputs["case_id"]["value"] == 'c"1<' and inputs["csrf"]["value"] == 'tok"en'
    assert inputs["m0"]["value"] == 'tox"ic'
    assert "evidence not found in the text: “gone”" in html
    radios = [attrs for t, attrs in tags if t == "input" and attrs.get("type") == "radio"]
    assert [(r["value"], r.get("accesskey"), "disabled" in r) for r in radios] == [
        ("agree", "1", False), ("disagree_safe", "2", False),
        ("disagree_unsafe", "3", True), ("skip", "4", False)]  # UNSAFE: "unsafe" is agree
    assert "3 left" in html and "1 held by other reviewers" in html


def test_a_failed_judgment_cannot_be_agreed_with():
    html = render_item(_offer(verdict=None), Viewer("ana", "t"), Remaining(1, 0))
    radios = [a for t, a in _tags(html) if t == "input" and a.get("type") == "radio"]
    assert [r["value"] for r in radios if "disabled" in r] == ["agree"]
    assert "judge said &lt;nonsense&gt;" in html


def test_empty_loading_and_sign_in_pages():
    assert "Nothing left to review" in render_empty(Viewer("ana", "t"), Remaining(0, 0))
    assert "held by other reviewers" in render_empty(Viewer("ana", "t"), Remaining(0, 2))
    loading = render_empty(Viewer("ana", "t"), None, loading="still reading <x>")
    assert 'http-equiv="refresh"' in loading and "&lt;x&gt;" in loading
    login = render_login('t"k', next_path='/x"><b>', error="<wrong>")
    assert not [t for t, _ in _tags(login) if t == "b"] and "&lt;wrong&gt;" in login
