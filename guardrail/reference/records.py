"""The records reference (``reference/records.md``), built from the record models.

Each record guardrail writes to Kafka gets its topic setting (with its
default), its Kafka key, a table per object (name, type, whether the key is
always there, description) and an example. The tables come from the models'
fields: :mod:`guardrail.stream.schemas` for the records written as plain dicts,
:mod:`guardrail.judging.models` for the spec's part of a result and
:mod:`guardrail.review.records` for the review topics.
``tests/reference/test_reference_records.py`` validates records of the real producers
and the examples below against the same models, unknown keys refused::

    >>> from guardrail.reference.records import records_page, RECORDS
    >>> [r.anchor for r in RECORDS][:3]
    ['result', 'dlq', 'judgment']
    >>> "| `case_id` | string | yes |" in records_page()
    True
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel

from ..review.records import LabelRecord, ReviewItem
from ..review.settings import ReviewSettings
from ..config.settings import Settings
from ..kafka.settings import KafkaSettings
from ..stream.alert_schemas import AgreementAlert, BudgetAlert, RegressionAlert
from ..stream.schemas import DlqRecord, JudgmentBundle, ResultRecord, WireRecord
from ._markdown import md_table, models_in
from .record_examples import EXAMPLES

__all__ = ["RecordDoc", "RECORDS", "records_page", "model_tables"]


@dataclass(frozen=True)
class RecordDoc:
    """One kind of record: its model, where it goes and how it is keyed."""

    anchor: str
    title: str
    model: type[BaseModel]
    #: The settings group and field that name the topic.
    topic_group: type[BaseModel]
    topic_setting: str
    key: str
    about: str

    @property
    def example(self) -> dict[str, Any]:
        return EXAMPLES[self.anchor]

    @property
    def default_topic(self) -> str:
        return str(self.topic_group.model_fields[self.topic_setting].default)

    @property
    def setting_link(self) -> str:
        """The topic setting, linked to its group on the settings page."""
        group = next(name for name, field in Settings.model_fields.items()
                     if field.annotation is self.topic_group)
        return f"[`{self.topic_setting}`](settings.md#{group})"


def _alert(anchor: str, title: str, model: type[BaseModel], key: str, about: str) -> RecordDoc:
    return RecordDoc(anchor, title, model, KafkaSettings, "alerts_topic", key,
                     about + " The same object is POSTed to `alert_webhook_url`.")


RECORDS: tuple[RecordDoc, ...] = (
    RecordDoc("result", "Result", ResultRecord, KafkaSettings, "results_topic",
              "the `case_id` (UTF-8)",
              "One per judged case: the spec's `RedteamMetrics` (`metrics`, `cost`) and the "
              "fields that name the case and join it back to its input. Sent with the "
              "input's Kafka headers. `guardrail replay` writes the same records to its "
              "`--results-topic`."),
    RecordDoc("dlq", "Dead letter", DlqRecord, KafkaSettings, "dlq_topic",
              "the input record's key, unchanged (none when it had none)",
              "One per input record that could not be judged, or per case of a many-case "
              "record (`otlp`) that could not. Sent with the input's Kafka headers. "
              "`guardrail replay` writes them to its `--dlq-topic`."),
    RecordDoc("judgment", "Judgment events", JudgmentBundle, KafkaSettings, "judgments_topic",
              "`metric|label=value,…` of the group *without* the `version_label` label "
              "(e.g. `toxicity|model=m,prompt_version=p3`), so a group's versions share a "
              "partition",
              "An event per metric of each judged case (and per metric of each case sampling "
              "left out, status `not_sampled`), from the judging side to the window counter, "
              "bundled: one record per key and window per batch of the judging agent. The "
              "Kafka timestamp is the first event's time; all of a record's events fall in "
              "the same window."),
    _alert("regression-alert", "Regression alert", RegressionAlert, "the metric's name",
           "Fired by the window counter when a metric's unsafe rate in a group's window "
           "breaks its alert rule."),
    _alert("budget-alert", "Budget alert", BudgetAlert, "`budget`",
           "Fired by a worker's judge budget when it first lowers the sample rate and "
           "when it is back at `sample_rate`."),
    _alert("agreement-alert", "Agreement alert", AgreementAlert, "the metric's name",
           "Fired (review on) when the judge's precision or recall against its reviewers "
           "falls below its floor in a window."),
    RecordDoc("review-item", "Review item", ReviewItem, ReviewSettings, "review_topic",
              "the `case_id` (UTF-8)",
              "One per judged result of which some metric was chosen for human review "
              "(review on: `review_users_file` set). A redelivered or replayed result "
              "chooses the same metrics; readers keep the latest item per key."),
    RecordDoc("label", "Label", LabelRecord, ReviewSettings, "labels_topic",
              "`<case_id>|<metric>` (UTF-8); the topic is compacted and the latest label "
              "of a key stands",
              "A reviewer's verdict on one metric of one review item, written by the "
              "worker's `/review` page. A tombstone (null value) withdraws the key's label; "
              "the review queue, the agreement figures and `calibrate --labels-topic` read "
              "the topic."),
)


# -- Markdown ----------------------------------------------------------------------------


def _markdown(rst: str) -> str:
    """A docstring's reStructuredText roles and literals as Markdown."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", rst)
    return " ".join(text.replace("``", "`").split())


def _summary(model: type[BaseModel]) -> str:
    return _markdown((model.__doc__ or "").strip().split("\n\n")[0])


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean",
            type(None): "null", Any: "any"}


def _inner(tp: Any) -> str:
    text = type_text(tp)
    return f"({text})" if " | " in text else text


def type_text(tp: Any, *, nullable: bool = True) -> str:
    """A field's type in words, models as links to their tables (without
    ``null`` when not ``nullable``: a key left out rather than written null)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        kept = [type_text(a) for a in args if nullable or a is not type(None)]
        return " | ".join(f"({t})" if " of " in t and len(kept) > 1 else t for t in kept)
    if origin is Literal:
        return " | ".join(f"`{orjson.dumps(a).decode()}`" for a in args)
    if origin in (list, tuple):
        return f"array of {_inner(args[0])}" if args else "array"
    if origin is dict:
        return f"object of {_inner(args[1])}" if args else "object"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    if tp in _SCALARS:
        return _SCALARS[tp]
    return f"`{getattr(tp, '__name__', tp)}`"


def _always_present(model: type[BaseModel]) -> set[str]:
    """The keys every record of ``model`` has. A field of a
    :class:`~guardrail.stream.schemas.WireRecord` with a default may be absent
    (and is never null); other models write every field their serializer keeps
    at its default (JudgeVerdict leaves out the null ones)."""
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    if issubclass(model, WireRecord):
        return required
    blank = model.model_construct(**dict.fromkeys(required))
    return set(blank.model_dump(mode="json", warnings=False))


def _wire_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {n: f for n, f in model.model_fields.items() if not f.exclude}


def model_tables(model: type[BaseModel], seen: set[type[BaseModel]],
                 level: int = 3) -> list[str]:
    """The table of ``model`` then of each object type it holds (depth first),
    leaving out those already in ``seen``."""
    seen.add(model)
    present = _always_present(model)
    rows = [[f"`{name}`", type_text(field.annotation, nullable=name in present),
             "yes" if name in present else "no", _markdown(field.description or "")]
            for name, field in _wire_fields(model).items()]
    parts = [f"{'#' * level} {model.__name__} {{#{model.__name__.lower()}}}", _summary(model),
             md_table(["Field", "Type", "Always there", "Description"], rows)]
    for field in _wire_fields(model).values():
        for inner in models_in(field.annotation):
            if inner not in seen:
                parts += model_tables(inner, seen, level)
    return parts


# -- the page ----------------------------------------------------------------------------

_INTRO = """\
# Records

Every record guardrail writes to Kafka, with the setting that names its topic,
its key and its fields. Values are UTF-8 JSON objects. This page is generated
from the code: from the models in `guardrail.stream.schemas` (for the records
written as plain dicts), `guardrail.judging.models` and `guardrail.review.records`. The
test suite validates records made by the real producers against the same
models, refusing any key they do not describe.

- **Always there**: *yes*, the key is in every record (its value may still be
  null where the type says so); *no*, the key may be absent, and is never
  null when present.
- **Bytes as text**: Kafka keys and header values (`key`, `headers`) are
  UTF-8 text as they are; anything else, and text that itself starts with
  `b64:`, is written as `b64:` + base64.
- **Versions**: judgment events, review items and labels carry `kind` and
  `schema_version`; a reader skips kinds and versions it does not know (the
  window counter counts them in `guardrail_unknown_records_total`), so workers
  of two releases can share the topics. Alerts tell their kind by `kind`.
- Topic names are [settings](settings.md) (flat names as written here).
"""


def _overview() -> str:
    rows = [[f"[{r.title}](#{r.anchor})", r.setting_link, f"`{r.default_topic}`", r.key]
            for r in RECORDS]
    return md_table(["Record", "Topic setting", "Default topic", "Kafka key"], rows)


def _section(record: RecordDoc, seen: set[type[BaseModel]]) -> str:
    head = [f"## {record.title} {{#{record.anchor}}}", record.about,
            f"- **Topic**: {record.setting_link} (default `{record.default_topic}`)\n"
            f"- **Key**: {record.key}"]
    tables = model_tables(record.model, seen)
    example = orjson.dumps(record.example, option=orjson.OPT_INDENT_2).decode()
    return "\n\n".join(head + tables + [f"Example:\n\n```json\n{example}\n```"])


def records_page() -> str:
    seen: set[type[BaseModel]] = set()
    sections = [_INTRO, _overview()] + [_section(r, seen) for r in RECORDS]
    return "\n\n".join(sections) + "\n"
