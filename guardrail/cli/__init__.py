"""The ``guardrail`` (alias ``nexagauge``) command line.

    guardrail estimate redteam --input cases.jsonl --limit 5
    guardrail run redteam --input cases.jsonl --output-dir out/ --fail-on-unsafe
    guardrail worker            # the streaming guardrail on Kafka
    guardrail status            # is each worker ok, paused or stalled?

The ``nexagauge`` alias exists because the judging contract's spec
(``redteam-node.md``) writes its command lines as ``nexagauge estimate redteam …``
and ``nexagauge run redteam …``; with the alias they run as written.

- :mod:`.batch` (with :mod:`.estimate_view`, :mod:`.progress`, :mod:`.options`) —
  ``run``, ``estimate`` and the flags that stand for settings.
- :mod:`.stream` (with :mod:`.rates`, :mod:`.status`) — ``broker``, ``worker``,
  ``produce``, ``tail``, ``rates``, ``replay``, ``status``.
- :mod:`.calibrate`, :mod:`.labels`, :mod:`.inputs` (with :mod:`.inputs_runs`,
  :mod:`.inputs_sessions`), :mod:`.local` — ``calibrate``, ``labels``,
  ``inputs check``, ``judge serve`` and ``demo``.

The top layer: it may import any wing, and none imports it. Commands import what
they run when they run (``estimate`` never loads litellm, ``--help`` no judge).
"""

from __future__ import annotations

import sys

import click

from ..errors import GuardrailError
from .batch import estimate_group, run_group

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             short_help="Score LLM outputs for safety with LLM judges.")
@click.version_option(package_name="guardrail")
def cli() -> None:
    """Score LLM outputs for safety risk with rubric-based LLM judging.

    Also installed as `nexagauge`, because the judging contract's spec writes its
    command lines as `nexagauge estimate redteam …` and `nexagauge run redteam …`:
    with the alias they run as written.
    """


cli.add_command(run_group)
cli.add_command(estimate_group)

try:  # the streaming commands need Kafka libraries; keep the batch CLI usable without
    from .stream import register as _register_stream
except ImportError as _exc:  # pragma: no cover - only without faust installed
    _STREAM_IMPORT_ERROR: ImportError | None = _exc
else:
    _STREAM_IMPORT_ERROR = None
    _register_stream(cli)

from .calibrate import calibrate_command  # noqa: E402
from .inputs import inputs_group  # noqa: E402
from .labels import labels_group  # noqa: E402
from .local import register as _register_local  # noqa: E402
from .status import status_command  # noqa: E402

cli.add_command(calibrate_command)
cli.add_command(inputs_group)
cli.add_command(labels_group)
cli.add_command(status_command)
_register_local(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console scripts; user errors exit 2 with one clear line."""
    try:
        cli.main(args=argv, prog_name=None, standalone_mode=True)
    except GuardrailError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
