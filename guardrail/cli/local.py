"""``judge serve`` and ``demo``: zero-setup commands.

    guardrail judge serve [--model-path GGUF] [--port P]
    guardrail demo [--judge auto|local|rules|configured] [--output-dir D]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..local.server import ServerOptions
from .batch import settings_from_flags, settings_options

__all__ = ["register"]


@click.group("judge")
def judge_group() -> None:
    """Run a judge locally."""


@judge_group.command("serve", short_help="Serve a GGUF model as a local OpenAI-style judge.")
@click.option("--model-path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Any GGUF chat model (default: the demo model from guardrail[local]).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one).")
@click.option("--parallel", type=click.IntRange(1, 16), default=ServerOptions.parallel,
              show_default=True,
              help="Requests judged at once (llama.cpp slots).")
@click.option("--context", type=click.IntRange(512), default=ServerOptions.context,
              show_default=True,
              help="Context tokens shared by the slots.")
@click.option("--threads", type=click.IntRange(1), help="CPU threads (default: all cores).")
def serve_command(model_path: Path | None, port: int, parallel: int, context: int,
                  threads: int | None) -> None:
    """Serve an OpenAI-compatible judge on loopback until Ctrl-C / SIGTERM.

    The first line printed is the api_base to use as GUARDRAIL_JUDGE_API_BASE.
    """
    from ..local.server import serve

    serve(model_path, port=port,
          options=ServerOptions(parallel=parallel, context=context, threads=threads))


@click.command("demo", short_help="Broker, judge, worker and sample traffic, offline.")
@click.option("--judge", "judge_kind", type=click.Choice(["auto", "local", "rules", "configured"]),
              default="auto", show_default=True,
              help="auto: the configured judge if GUARDRAIL_JUDGE_MODEL/--model is set, else "
                   "the local model; rules: the stand-in rule judge (fast, not a model).")
@click.option("--model-path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF for the local judge (default: the demo model).")
@click.option("--output-dir", default="guardrail-demo", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where results.jsonl, alerts.jsonl, summary.json and logs go.")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Give up when no result arrives for this many seconds.")
@settings_options
def demo_command(judge_kind: str, model_path: Path | None, output_dir: Path,
                 idle_timeout: float, **flags: Any) -> None:
    """Broker, judge, worker and sample traffic in one command; shows an alert firing."""
    from ..demo.runner import Demo, DemoOptions

    settings = settings_from_flags(**flags)
    options = DemoOptions(output_dir=output_dir, judge=judge_kind, model_path=model_path,
                          idle_timeout=idle_timeout)
    sys.exit(Demo(settings, options, echo=lambda line: click.echo(line)).run())


def register(cli: click.Group) -> None:
    for command in (judge_group, demo_command):
        cli.add_command(command)
