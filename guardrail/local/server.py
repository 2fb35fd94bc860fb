"""Serve a GGUF model as an OpenAI-compatible judge on loopback, with ``xllamacpp``.

``xllamacpp.Server`` runs llama.cpp's own HTTP server in background threads
(``/v1/chat/completions``, ``response_format`` json_schema enforced by a
grammar), so the judging core reaches it like any OpenAI-compatible server (plain
HTTP with ``judge_transport: auto``)::

    guardrail judge serve                        # default model, free port
    guardrail judge serve --model-path my.gguf --port 8090
    # first stdout line: http://127.0.0.1:8090/v1 — then point guardrail at it:
    export GUARDRAIL_JUDGE_MODEL=openai/local-judge GUARDRAIL_JUDGE_API_KEY=local \\
           GUARDRAIL_JUDGE_API_BASE=http://127.0.0.1:8090/v1

From Python (tests, ``guardrail demo``)::

    with LocalJudgeServer(model_path, port=0) as server:
        print(server.api_base)
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .._processes import free_port
from ..errors import ConfigError
from .model import INSTALL_HINT

__all__ = ["LocalJudgeServer", "ServerOptions", "serve", "LOCAL_JUDGE_MODEL", "judge_settings",
           "require_runtime", "judge_speed", "judge_activity"]

#: The litellm model string for the local server (llama.cpp ignores the name).
LOCAL_JUDGE_MODEL = "openai/local-judge"


def judge_settings(api_base: str) -> dict[str, Any]:
    """Settings that point the judging core at a local server: free, slow, two slots."""
    return {"judge_model": LOCAL_JUDGE_MODEL, "judge_api_base": api_base,
            "judge_api_key": "local",  # the OpenAI client insists on some key
            "judge_input_cost_per_token": 0.0, "judge_output_cost_per_token": 0.0,
            "judge_timeout": 180.0, "judge_max_retries": 1, "judge_concurrency": 2}


@dataclass(frozen=True)
class ServerOptions:
    """llama.cpp knobs that matter on a small CPU box."""

    #: Two slots: with one judge call per message every prompt starts with the
    #: same rubrics, so either slot reuses that prefix from its KV cache
    #: (llama.cpp's ``cache_prompt``, on by default) and only the fence token
    #: and the judged text are read anew; with one call per metric, each
    #: rubric's prompt settles in its own slot.
    parallel: int = 2
    #: Shared by the slots (4,096 each); a judge call is ~900 prompt tokens (rubrics with
    #: examples, ~100-word text) + up to 400 answer tokens per metric.
    context: int = 8192
    threads: int | None = None
    #: llama.cpp log level (0 errors only … 4 debug); logs go to stderr.
    verbosity: int = 1


def require_runtime() -> Any:
    """The ``xllamacpp`` module, or a one-line error saying how to install it."""
    try:
        import xllamacpp
    except ImportError:
        raise ConfigError(f"the local judge needs the xllamacpp package: {INSTALL_HINT}"
                          ) from None
    return xllamacpp


def _params(xlc: Any, model_path: Path, host: str, port: int, options: ServerOptions) -> Any:
    params = xlc.CommonParams()
    params.model.path = str(model_path)
    params.hostnames = [host]
    params.port = port
    params.n_ctx = options.context
    params.n_parallel = options.parallel
    threads = options.threads or max(1, os.cpu_count() or 1)
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = options.verbosity
    params.ui = False            # an API for the judge, not a chat page
    params.endpoint_slots = False
    # /metrics: prompt and generation speed, read by `guardrail demo` (loopback only).
    params.endpoint_metrics = True
    # Prompts are read in batches of this many tokens, and /metrics moves once per
    # batch: with llama.cpp's 2,048 both slots' first prompts (~1,500 tokens in the
    # demo, 20-30 s on 2 cores) are one batch, and the demo could show no progress
    # through them. 512 is the micro-batch llama.cpp computes in anyway (n_ubatch),
    # so reading costs the same.
    params.n_batch = 512
    # A slot is reused for a prompt only when they share most of their prefix,
    # so bias and toxicity prompts settle in different slots (the default 0.1
    # lets the shared system prompt pull both metrics into one slot).
    params.slot_prompt_similarity = 0.5
    return params


_COUNTER = re.compile(r"^llamacpp:(\w+) ([0-9.eE+-]+)$", re.MULTILINE)


def judge_speed(api_base: str, timeout: float = 5.0) -> dict[str, float] | None:
    """How fast the local judge read prompts and wrote answers so far, from
    llama.cpp's ``/metrics``: prefill and decode tokens per second (cached
    prompt tokens excluded: they are not read again), token counts, and how
    many prompt tokens came from the prompt cache. None if unavailable."""
    c = _counters(api_base, timeout)
    if c is None:
        return None
    prompt, predicted = c.get("prompt_tokens_total", 0.0), c.get("tokens_predicted_total", 0.0)
    prompt_s, predicted_s = c.get("prompt_seconds_total"), c.get("tokens_predicted_seconds_total")
    return {"prefill_tokens_per_s": round(prompt / prompt_s, 1) if prompt_s else 0.0,
            "decode_tokens_per_s": round(predicted / predicted_s, 1) if predicted_s else 0.0,
            "prompt_tokens_read": prompt, "prompt_tokens_cached":
                c.get("prompt_tokens_cached_total", 0.0), "tokens_generated": predicted}


def judge_activity(api_base: str, timeout: float = 2.0) -> dict[str, float | None] | None:
    """What the local judge is doing now, from llama.cpp's ``/metrics``: calls in
    progress, prompt tokens of finished prompts and the seconds spent reading them,
    and ``tokens_in_slot``, the most tokens a slot has held. Until the first prompt
    is read, that is how far its reading got (it moves once per batch of
    ``n_batch`` tokens); None when this llama.cpp does not report it. None when
    ``/metrics`` does not answer."""
    c = _counters(api_base, timeout)
    if c is None:
        return None
    return {"requests_processing": c.get("requests_processing", 0.0),
            "prompt_tokens_read": c.get("prompt_tokens_total", 0.0),
            "prompt_seconds": c.get("prompt_seconds_total", 0.0),
            "tokens_in_slot": c.get("n_tokens_max")}


def _counters(api_base: str, timeout: float) -> dict[str, float] | None:
    """llama.cpp's ``/metrics`` as name → value (``llamacpp:`` prefix dropped)."""
    url = api_base.rstrip("/").removesuffix("/v1") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # loopback only
            text = response.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    return {name: float(value) for name, value in _COUNTER.findall(text)}


class LocalJudgeServer:
    """One in-process llama.cpp server; ``start`` blocks until the model is loaded."""

    def __init__(self, model_path: Path | str, *, host: str = "127.0.0.1", port: int = 0,
                 options: ServerOptions | None = None) -> None:
        self.model_path = Path(model_path)
        self.host = host
        self.port = port or free_port()
        self.options = options or ServerOptions()
        self._server: Any = None

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> LocalJudgeServer:
        if not self.model_path.is_file():
            raise ConfigError(f"model file {self.model_path} does not exist")
        xlc = require_runtime()
        try:
            self._server = xlc.Server(_params(xlc, self.model_path, self.host, self.port,
                                              self.options))
        except Exception as exc:  # xllamacpp raises plain RuntimeErrors for load failures
            raise ConfigError(f"llama.cpp could not serve {self.model_path}: {exc}") from None
        return self

    def stop(self) -> None:
        # Dropping the last reference runs ~Server, which joins llama.cpp's threads.
        self._server = None

    def __enter__(self) -> LocalJudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _resolve_model(model_path: Path | None, out: TextIO) -> Path:
    if model_path is not None:
        return model_path
    from .model import ensure_default_model

    state = {"shown": -1}

    def progress(done: int, total: int) -> None:
        percent = done * 100 // max(total, 1)
        if percent // 10 != state["shown"]:
            state["shown"] = percent // 10
            print(f"preparing the default model: {percent}%", file=out, flush=True)

    return ensure_default_model(progress=progress)


def serve(model_path: Path | None = None, *, host: str = "127.0.0.1", port: int = 0,
          options: ServerOptions | None = None, out: TextIO = sys.stdout,
          log: TextIO = sys.stderr) -> None:
    """Serve until SIGTERM/SIGINT. The first line on ``out`` is the api_base."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError("the local judge listens on loopback only (it has no API key)")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        path = _resolve_model(model_path, log)
        print(f"loading {path.name} …", file=log, flush=True)
        server = LocalJudgeServer(path, host=host, port=port, options=options).start()
        print(server.api_base, file=out, flush=True)  # parents read this line
        # Concurrency = slots: calls beyond them wait inside llama.cpp, where the
        # judge's own timing (calibrate's latency) would count the wait.
        print(f"local judge ready. Use it with:\n  export GUARDRAIL_JUDGE_MODEL="
              f"{LOCAL_JUDGE_MODEL} GUARDRAIL_JUDGE_API_KEY=local "
              f"GUARDRAIL_JUDGE_API_BASE={server.api_base} "
              f"GUARDRAIL_JUDGE_CONCURRENCY={server.options.parallel} "
              f"GUARDRAIL_JUDGE_TIMEOUT=180\n(Ctrl-C or SIGTERM stops it)", file=log, flush=True)
        while not stop.wait(0.5):
            pass
        server.stop()
        print("local judge stopped", file=log, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
