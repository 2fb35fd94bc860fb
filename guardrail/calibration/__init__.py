"""How far to trust a judge: run it over labelled cases, measure its agreement with
the labels, and choose the verdict thresholds that meet a target::

    from guardrail.calibration import calibrate, read_labels, write_report
    cases, problems = read_labels(Path("labels.jsonl"), metrics=["toxicity"])
    report = await calibrate(cases, settings=settings, target=Target.parse("precision=0.9"))
    write_report(report, Path("calibration"))     # report.json, curves.html, thresholds.yaml

- :mod:`.labels` — labelled cases (messages, agent runs, conversations) read and sampled.
- :mod:`.calibrate` — the judge over the labels; :mod:`.report` — agreement per
  metric and where the threshold goes; :mod:`.thresholds` — precision, recall and
  accuracy against the threshold; :mod:`.curves` — them drawn as ``curves.html``.
- ``data/`` — the labelled sets that ship (see ``data/README.md``): the built-in set
  ``calibrate`` uses without ``--labels``, and the sets the judge-quality page measures.

It sits above the settings it is started with and reads runs and sessions as
the worker judges them; never Kafka or the stream (the labels topic is read by
:mod:`guardrail.review.labels_topic`).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "calibrate": ".calibrate", "write_report": ".calibrate", "CalibrationReport": ".calibrate",
    "LabelledCase": ".labels", "read_labels": ".labels", "read_label_rows": ".labels",
    "default_labels_path": ".labels", "Target": ".thresholds", "curve": ".thresholds",
    "recommend": ".thresholds",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
