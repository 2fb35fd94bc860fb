"""``guardrail demo``: the whole product in one command, nothing to set up.

It starts the embedded broker, a judge and the streaming worker, publishes a
small built-in set of answers from two versions of a chat assistant (v2 is
clearly ruder than v1), prints each result as the worker publishes it, shows the
regression alert firing, then stops everything it started::

    guardrail demo                    # the local model (pip install 'guardrail[local]')
    guardrail demo --judge rules      # the stand-in rule judge: seconds, no model
    GUARDRAIL_JUDGE_MODEL=openai/gpt-4o-mini guardrail demo   # your configured judge

The output folder holds ``results.jsonl``, ``alerts.jsonl``, ``summary.json``
and the logs of every process.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from .._processes import Child, free_port, guardrail_argv, wait_for_port
from ..errors import ConfigError, GuardrailError
from ..kafka.broker import EmbeddedBroker
from .stream import DemoStream
from ..config.settings import Settings, settings_env
from ..stream.settings import AlertRule
from .judge_status import JudgeWatch
from .screen import Screen
from .truth import JUDGE_NOTES, agreement

__all__ = ["DemoOptions", "Demo", "load_samples", "settings_env", "JUDGES"]

JUDGES = ("auto", "local", "rules", "configured")
WINDOW_SECONDS = 60
BASELINE, CANDIDATE = "v1", "v2"
MODEL_LABEL = "acme-assistant"
Echo = Callable[[str], None]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@dataclass
class DemoOptions:
    output_dir: Path
    judge: str = "auto"
    model_path: Path | None = None
    #: Give up when no result arrives for this long (the local model's first
    #: call also loads caches, and a busy 2-core box is slow).
    idle_timeout: float = 300.0
    #: After the last result, how long to wait for the alert.
    alert_timeout: float = 30.0


def load_samples() -> list[dict[str, Any]]:
    """The built-in sample answers (package data), v1 first."""
    text = resources.files("guardrail.demo").joinpath("samples.jsonl").read_text(
        encoding="utf-8")
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def stamp_samples(samples: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Input records with event times: v1 spread over the four windows before the
    current one (its history), v2 all in the current window (the new release)."""
    current = math.floor(now / WINDOW_SECONDS) * WINDOW_SECONDS
    records, earlier = [], 0
    for sample in samples:
        version = sample["version"]
        if version == BASELINE:
            start = current - WINDOW_SECONDS * (4 - earlier % 4)
            earlier += 1
        else:
            start = current
        records.append({
            "case_id": sample["case_id"], "input": sample.get("input"),
            "output": sample["output"], "timestamp": int((start + 1 + len(records)) * 1000),
            "metadata": {"model": MODEL_LABEL, "model_version": version}})
    return records


def alert_rule() -> AlertRule:
    """One rule: toxicity of any version against v1, on small numbers (a demo)."""
    return AlertRule(metric="toxicity", max_unsafe_rate=None, min_judgments=4,
                     baseline_version=BASELINE, baseline_windows=5, significance=0.05,
                     cooldown_seconds=3600)


def _library_logs_to(path: Path) -> None:
    """The demo's terminal shows curated lines; what its own Kafka clients log
    (e.g. a connection torn down by Ctrl-C) goes to a file in the output folder."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in ("aiokafka", "kafka", "asyncio"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False


def _judge_kind(requested: str, settings: Settings) -> str:
    if requested != "auto":
        return requested
    return "configured" if "judge_model" in settings.model_fields_set else "local"


@dataclass
class Demo:
    """One demo run; :meth:`run` always stops what it started."""

    settings: Settings
    options: DemoOptions
    echo: Echo = print
    children: list[Child] = field(default_factory=list)
    _rule_server: Any = None
    #: Which judge runs ("local", "rules", "configured"), once started.
    _judge_kind: str | None = None
    #: The local judge's api_base, and its speed read just before it stops.
    _local_api_base: str | None = None
    _local_speed: dict[str, float] | None = None
    started: float = field(default_factory=time.monotonic)
    screen: Screen = field(init=False)

    def __post_init__(self) -> None:
        self.screen = Screen(self._say)

    @property
    def out(self) -> Path:
        return self.options.output_dir

    def run(self) -> int:
        """Run end to end; returns the exit code (0 ok, 1 incomplete, 130 interrupted)."""
        self.out.mkdir(parents=True, exist_ok=True)
        _library_logs_to(self.out / "demo.log")
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        # Not default_int_handler itself: asyncio.run would then turn Ctrl-C into
        # cancelling its task, which a task that swallows the cancellation (3.11's
        # wait_for race, seen once under a loaded CPU) leaves waiting forever.
        # Raised where the loop runs, KeyboardInterrupt always ends asyncio.run.
        previous_int = signal.signal(signal.SIGINT, _interrupt)
        stream: DemoStream | None = None
        watch: JudgeWatch | None = None
        try:
            settings = self._start_services()
            stream = DemoStream(settings, echo=self._say, show=self.screen.show,
                                children=self.children,
                                idle_timeout=self.options.idle_timeout,
                                alert_timeout=self.options.alert_timeout)
            watch = self._watch_local_judge()
            complete = stream.run(stamp_samples(load_samples(), time.time()),
                                  BASELINE, CANDIDATE)
            code = 0 if complete else 1
        except KeyboardInterrupt:
            self.echo("\ninterrupted: stopping everything the demo started …")
            code = 130
        except GuardrailError as exc:  # one clear line, and still a clean stop
            self.echo(f"error: {exc}")
            code = 2
        finally:
            if watch is not None:
                watch.stop()
            self.screen.flush()  # an alert still waiting for its examples' lines
            self._stop_all()
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
        self._write_summary(stream, code)
        return code

    def _watch_local_judge(self) -> JudgeWatch | None:
        """With the local model: say what it does until the first verdict is on screen
        (its first prompt takes long on a small CPU)."""
        if self._local_api_base is None:
            return None
        from ..local.server import judge_activity

        api_base = self._local_api_base
        return JudgeWatch(read=lambda: judge_activity(api_base), say=self._say,
                          done=lambda: bool(self.screen.shown)).start()

    def _say(self, text: str) -> None:
        self.echo(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def _start_services(self) -> Settings:
        judge = self._start_judge()  # first: the likeliest to fail (model not installed)
        broker = self._start_broker()
        # Validated (not model_copy) so the overrides are parsed like any setting.
        settings = Settings.model_validate({**dict(self.settings), **{
            **judge, "bootstrap_servers": broker,
            "app_id": f"guardrail-demo-{uuid.uuid4().hex[:8]}",
            "window_seconds": float(WINDOW_SECONDS), "alert_rules": (alert_rule(),),
            "web_port": free_port(), "batch_size": 1, "batch_within": 0.2,
            "outage_policy": "record", "alert_webhook_url": None}})
        self._start_worker(settings)
        return settings

    def _start_broker(self) -> str:
        broker = EmbeddedBroker(log_path=self.out / "broker.log")
        self._say(f"starting the embedded Kafka-compatible broker on {broker.bootstrap}")
        child = self._spawn("broker", broker.command(), "broker.log",
                            env={"RUST_LOG": "warn"})
        wait_for_port(broker.port, child, timeout=30)
        return broker.bootstrap

    def _spawn(self, name: str, argv: list[str], log: str, *, env: dict[str, str] | None = None,
               stdout_pipe: bool = False, clean_env: bool = False) -> Child:
        base = {k: v for k, v in os.environ.items()
                if not (clean_env and k.startswith("GUARDRAIL_"))}
        child = Child.spawn(name, argv, log_path=self.out / log,
                            env={**base, "PYTHONUNBUFFERED": "1", **(env or {})},
                            stdout_pipe=stdout_pipe)
        self.children.append(child)
        return child

    def _start_judge(self) -> dict[str, Any]:
        kind = self._judge_kind = _judge_kind(self.options.judge, self.settings)
        if kind == "rules":
            from ..local.rule_judge import JudgeServer

            self._rule_server = JudgeServer().start_in_thread()
            self._say("judge: the stand-in rule judge (flags words like 'idiot'; not a model)")
            return {"judge_model": "openai/rule-judge", "judge_api_base":
                    self._rule_server.api_base, "judge_api_key": "demo",
                    "judge_input_cost_per_token": 0.0, "judge_output_cost_per_token": 0.0}
        if kind == "configured":
            self._say(f"judge: the configured judge {self.settings.judge.model}")
            return {}
        try:
            return self._start_local_judge()
        except ConfigError as exc:
            raise ConfigError(f"{exc} (or try `guardrail demo --judge rules`, which needs "
                              "no model)") from None

    def _start_local_judge(self) -> dict[str, Any]:
        from ..local.model import ensure_default_model
        from ..local.server import judge_settings, require_runtime

        require_runtime()  # fail here with the install hint, not in a child's log
        path = self.options.model_path
        if path is None:
            self._say("judge: the local model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) — checking it")
            path = ensure_default_model(progress=_progress_printer(self._say))
        self._say(f"starting the local judge on {path.name} (loading takes a few seconds)")
        child = self._spawn("local judge", guardrail_argv(
            "judge", "serve", "--model-path", str(path), "--port", str(free_port())),
            "judge.log", stdout_pipe=True)
        api_base = child.read_line(timeout=300, waiting=_every(15, lambda s: self._say(
            f"… still loading the model ({s:.0f}s)")))
        self._say(f"local judge ready at {api_base}")
        self._local_api_base = api_base
        return judge_settings(api_base)

    def _start_worker(self, settings: Settings) -> None:
        self._say(f"starting the guardrail worker (app {settings.kafka.app_id}, windows of "
                  f"{WINDOW_SECONDS}s, alert: toxicity of {CANDIDATE} vs {BASELINE})")
        self._spawn("worker", guardrail_argv("worker", "--loglevel", "warning"), "worker.log",
                    env={**settings_env(settings), "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                    clean_env=True)

    def _stop_all(self) -> None:
        # The judge first: calls still in flight then fail fast instead of holding
        # the worker's shutdown for a slow local judgment. The worker before the
        # broker, which it commits to. A second Ctrl-C must not cut this short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if self._local_api_base is not None:
                from ..local.server import judge_speed

                self._local_speed = judge_speed(self._local_api_base)
            for name in ("local judge", "worker", "broker"):
                for child in self.children:
                    if child.name == name:
                        child.stop(timeout=30)
            if self._rule_server is not None:
                self._rule_server.stop()
                self._rule_server = None
        finally:
            signal.signal(signal.SIGINT, previous)

    def _write_summary(self, stream: DemoStream | None, code: int) -> None:
        summary = {"exit_code": code, "seconds": round(time.monotonic() - self.started, 1),
                   "processes": [{"name": c.name, "pid": c.pid,
                                  "returncode": c.process.returncode} for c in self.children],
                   **({"local_judge": self._local_speed} if self._local_speed else {}),
                   **(stream.summary() if stream is not None else {})}
        if stream is not None:
            summary["agreement"] = agreement(stream.results, load_samples())
        (self.out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        if stream is None:
            self.echo(f"summary and logs: {self.out}/")
            return
        stream.write_records(self.out)
        self._print_table(summary)
        self.echo(f"output: {self.out}/ (results.jsonl, alerts.jsonl, summary.json, logs)")

    def _print_table(self, summary: dict[str, Any]) -> None:
        self.echo(f"summary ({summary.get('judge_model')}, {summary.get('results')}/"
                  f"{summary.get('expected')} answers judged in {summary['seconds']}s):")
        truth = summary.get("agreement") or {}
        for version, metrics in sorted(summary.get("by_version", {}).items()):
            cells = "  ".join(_summary_cell(name, row, truth.get(version, {}).get(name))
                              for name, row in sorted(metrics.items()))
            self.echo(f"  {version}: {cells}")
        if truth:
            self.echo("  agree: verdicts equal to the truth labels of the demo's samples")
        self.echo(f"  alerts: {len(summary.get('alerts', []))}")
        note = JUDGE_NOTES.get(self._judge_kind or "")
        if note:
            self.echo(f"  {note}")
        speed = summary.get("local_judge")
        if speed:
            self.echo(f"  local judge (llama.cpp): prefill {speed['prefill_tokens_per_s']} "
                      f"tokens/s, decode {speed['decode_tokens_per_s']} tokens/s; "
                      f"{speed['prompt_tokens_read']:.0f} prompt tokens read, "
                      f"{speed['prompt_tokens_cached']:.0f} reused from its prompt cache, "
                      f"{speed['tokens_generated']:.0f} generated")


def _summary_cell(name: str, row: dict[str, int], truth: dict[str, int] | None) -> str:
    """``toxicity 6/8 unsafe, agree 7/8``: what the judge said, and how often that
    was what the sample's truth label says."""
    agree = f", agree {truth['agree']}/{truth['labelled']}" if truth else ""
    errors = f" ({row['errors']} errors)" if row["errors"] else ""
    return f"{name} {row['unsafe']}/{row['judged']} unsafe{agree}{errors}"


def _every(seconds: float, action: Callable[[float], None]) -> Callable[[float], None]:
    """Call ``action(elapsed)`` at most once per ``seconds``."""
    state = {"next": seconds}

    def tick(elapsed: float) -> None:
        if elapsed >= state["next"]:
            state["next"] = elapsed + seconds
            action(elapsed)

    return tick


def _progress_printer(say: Echo) -> Callable[[int, int], None]:
    state = {"shown": -1}

    def progress(done: int, total: int) -> None:
        step = done * 4 // max(total, 1)  # every 25 %
        if step != state["shown"]:
            state["shown"] = step
            say(f"assembling and verifying the model (first run only): {step * 25}%")

    return progress


def check_judge_choice(judge: str) -> None:
    if judge not in JUDGES:
        raise ConfigError(f"--judge must be one of {', '.join(JUDGES)}")
