"""A reviewer's answer on one item, from the page's form or a script's JSON,
checked against what is still open on the item::

    answer = parse_form(await request.post())   # fields: case_id, action, m0/c0/n0, m1/c1/n1…
    answer = parse_json(await request.json())   # {"case_id": …, "labels": [{"metric": …,
                                                #   "choice": "agree", "note": …}]} or "skip": true
    labels, skipped = answer.decide(offer.item, offer.metrics, reviewer="ana",
                                    gate_open=offer.gate_open)

Choices: ``agree``, ``disagree_safe``, ``disagree_unsafe`` (a label is
written) or ``skip`` (none; the metric stays open for other reviewers). The
form must answer every metric it showed (the page marks each group
required); a script may answer a subset, the rest stays open.

On an item the gate held (gate mode) the answer also says ``release`` (the
record goes on to the approved topic) or ``keep`` (it stays held) — the form's
``gate`` field (with ``gate_note``), JSON's ``"gate": "release"`` — written as a
:class:`~.records.GateAnswer`; ``skip`` leaves the hold for another reviewer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .records import CHOICES, GATE_ANSWERS, GATE_LABEL, GateAnswer, LabelRecord, ReviewItem, \
    ReviewMetric

__all__ = ["Answer", "Invalid", "parse_form", "parse_json", "SKIP", "FORM_CHOICES",
           "MAX_NOTE_CHARS"]

SKIP = "skip"
FORM_CHOICES: tuple[str, ...] = (*CHOICES, SKIP)
MAX_NOTE_CHARS = 2000
#: More metrics than any rubric set has; bounds the work on a crafted form.
MAX_METRICS = 64


class Invalid(ValueError):
    """The answer cannot be used; the message says why. ``status``: 400, or 409
    when the item changed under the reviewer (a metric labelled meanwhile)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Answer:
    """Choices per metric name: ``(choice, note)``; ``skip_all``: the whole item;
    ``gate``: ``(release | keep | skip, note)`` on a held record, None: not answered."""

    case_id: str
    choices: dict[str, tuple[str, str | None]]
    skip_all: bool = False
    #: Every shown metric must be answered (the form); a script may answer a subset.
    complete: bool = True
    gate: tuple[str, str | None] | None = None

    def decide(self, item: ReviewItem, open_metrics: Sequence[ReviewMetric], *,
               reviewer: str, gate_open: bool = False,
               ) -> tuple[list[LabelRecord | GateAnswer], list[str]]:
        """The labels (and gate answer) to write and what was skipped (metric names,
        ``@gate`` for the hold); :class:`Invalid` otherwise."""
        open_names = [m.name for m in open_metrics] + ([GATE_LABEL] if gate_open else [])
        if self.skip_all:
            return [], open_names
        if self.gate is not None and not gate_open:
            raise Invalid("this item's hold is answered already or it was not held; "
                          "reload for what is still open", status=409)
        if self.complete and gate_open and self.gate is None:
            raise Invalid("choose release, keep or skip for the held record")
        open_names = open_names[:-1] if gate_open else open_names
        for name in self.choices:
            if name not in open_names:
                if any(m.name == name for m in item.metrics):
                    raise Invalid(f"{name} of this item was labelled meanwhile; reload for "
                                  "what is still open", status=409)
                raise Invalid(f"this item has no metric {name[:80]!r}")
        if self.complete:
            missing = [n for n in open_names if n not in self.choices]
            if missing:
                raise Invalid(f"choose agree, disagree or skip for {', '.join(missing)}")
        labels: list[LabelRecord | GateAnswer] = []
        skipped: list[str] = []
        if self.gate is not None:
            gate_choice, gate_note = self.gate
            if gate_choice == SKIP:
                skipped.append(GATE_LABEL)
            else:
                labels.append(GateAnswer.from_item(item, gate_choice,  # type: ignore[arg-type]
                                                   reviewer=reviewer, note=gate_note))
        elif gate_open:
            skipped.append(GATE_LABEL)
        for name, (choice, note) in self.choices.items():
            if choice == SKIP:
                skipped.append(name)
                continue
            try:
                labels.append(LabelRecord.from_choice(item, name, choice,  # type: ignore[arg-type]
                                                      reviewer=reviewer, note=note))
            except ValueError as exc:  # agree with a verdict the judge never gave
                raise Invalid(f"{name}: {exc}") from None
        return labels, skipped


def _choice(metric: str, choice: Any, note: Any) -> tuple[str, str | None]:
    if choice not in FORM_CHOICES:
        raise Invalid(f"choose agree, disagree or skip for {metric[:80]}"
                      + (f" (not {str(choice)[:40]!r})" if choice else ""))
    return choice, _note(metric, note)


def _gate_choice(choice: Any, note: Any) -> tuple[str, str | None] | None:
    """The answer on a held record: None when none was given."""
    if choice is None or choice == "":
        return None
    if choice not in (*GATE_ANSWERS, SKIP):
        raise Invalid(f"choose release, keep or skip for the held record (not "
                      f"{str(choice)[:40]!r})")
    return choice, _note("the held record", note)


def _note(metric: str, note: Any) -> str | None:
    if note is not None and not isinstance(note, str):
        raise Invalid(f"the note on {metric[:80]} must be text")
    note = (note or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise Invalid(f"the note on {metric[:80]} is longer than {MAX_NOTE_CHARS} characters")
    return note or None


def _case_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid("the answer names no item (case_id)")
    return value


def parse_form(form: Mapping[str, Any]) -> Answer:
    """The page's form: ``case_id``, ``action`` (save / skip), per shown metric
    ``m<i>`` (its name), ``c<i>`` (the choice), ``n<i>`` (a note), and on a held
    record ``gate`` (release / keep / skip) with ``gate_note``."""
    case_id = _case_id(form.get("case_id"))
    if form.get("action") == "skip":
        return Answer(case_id, {}, skip_all=True)
    choices: dict[str, tuple[str, str | None]] = {}
    for i in range(MAX_METRICS):
        metric = form.get(f"m{i}")
        if metric is None:
            break
        if not isinstance(metric, str) or metric in choices:
            raise Invalid("the form names a metric twice or not as text")
        choices[metric] = _choice(metric, form.get(f"c{i}"), form.get(f"n{i}"))
    gate = _gate_choice(form.get("gate"), form.get("gate_note"))
    if not choices and gate is None:
        raise Invalid("the form holds no metric and no answer on a held record")
    return Answer(case_id, choices, gate=gate)


def parse_json(body: Any) -> Answer:
    """A script's answer: ``{"case_id": …, "labels": [{"metric", "choice",
    "note"?}, …], "gate": "release" | "keep", "gate_note": …}`` (labels or gate, or
    both), or ``{"case_id": …, "skip": true}``."""
    if not isinstance(body, dict):
        raise Invalid("expected a JSON object with case_id and labels")
    case_id = _case_id(body.get("case_id"))
    if body.get("skip") is True:
        return Answer(case_id, {}, skip_all=True)
    gate = _gate_choice(body.get("gate"), body.get("gate_note"))
    entries = body.get("labels", [] if gate is not None else None)
    if not isinstance(entries, list) or (not entries and gate is None) \
            or len(entries) > MAX_METRICS:
        raise Invalid(f"labels must be a list of 1 to {MAX_METRICS} "
                      '{"metric": …, "choice": …, "note": …} objects')
    choices: dict[str, tuple[str, str | None]] = {}
    for entry in entries:
        metric = entry.get("metric") if isinstance(entry, dict) else None
        if not isinstance(metric, str) or metric in choices:
            raise Invalid("each label needs a metric name, each metric once")
        choices[metric] = _choice(metric, entry.get("choice"), entry.get("note"))
    return Answer(case_id, choices, complete=False, gate=gate)
