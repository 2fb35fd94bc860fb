"""A ``run --batch-api`` backfill of 10,000 cases against the stand-in batch server.

    flock /tmp/guardrail-bench.lock python bench/replay_batch/batch_api.py   # ~2-3 min
    python bench/replay_batch/batch_api.py --cases 2000 --chunk 500 --skip-sync
    python bench/replay_batch/batch_api.py --provider anthropic   # Message Batches,
                                                                  # an anthropic/ judge

The real command in its own process (``guardrail run redteam --batch-api``),
the stand-in batch server (tests/support/batch_server.py, the rule judge's
answers) served from a thread of this process. Figures: requests, chunks
(batches created), status checks, wall time from start to exit; the same
command again on the same output folder (a restart: what it re-submits);
then the synchronous run of the same cases against the stand-in judge, for
the verdicts (they must match) and the price. Both are priced for
``--model`` (default ``openai/gpt-4o-mini``; with ``--provider anthropic``,
``anthropic/claude-haiku-4-5`` against the stand-in Anthropic API,
tests/support/anthropic_batch_server.py, which serves the synchronous
``/v1/messages`` too) from litellm's bundled map on the token counts the
stand-ins report (characters / 4), so the ratio is the price map's, not a
provider's bill. Writes bench/results/batch_api-<stamp>.json.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import PY, ROOT, cases, meta, write_json

from guardrail.local.rule_judge import JudgeServer
from tests.support.anthropic_batch_server import AnthropicBatchServer
from tests.support.batch_server import BatchServer

KEY = "sk-bench-0123456789"
MODELS = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-haiku-4-5"}


def _batch_server(opts: argparse.Namespace) -> Any:
    return AnthropicBatchServer(key=KEY) if opts.provider == "anthropic" else BatchServer()


def _write_cases(path: Path, n: int) -> None:
    path.write_bytes(b"\n".join(value for _, value, _ in cases(n, prefix="b")) + b"\n")


def _run(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run([PY, "-m", "guardrail.cli", *args], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"guardrail {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc


def _env(opts: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update({"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "GUARDRAIL_JUDGE_API_KEY": KEY,
                "GUARDRAIL_BATCH_MAX_REQUESTS": str(opts.chunk),
                "GUARDRAIL_BATCH_GATHER_SECONDS": "0.5",
                "GUARDRAIL_BATCH_POLL_SECONDS": str(opts.poll),
                "GUARDRAIL_BATCH_POLL_MAX_SECONDS": str(opts.poll_max)})
    return env


def _summary(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "summary.json").read_text())
    return {"cases": data["cases"], "judged": data["judged"], "unsafe": sum(
        m["unsafe"] for m in data["metrics"].values()), "cost_usd": data["cost"]["cost"],
        "input_tokens": data["cost"]["input_tokens"],
        "output_tokens": data["cost"]["output_tokens"]}


def _batch(opts: argparse.Namespace, inputs: Path, out: Path) -> dict[str, Any]:
    with _batch_server(opts) as server:
        command = ["run", "redteam", "--input", str(inputs), "--output-dir", str(out),
                   "--batch-api", "--model", opts.model, "--api-base", server.api_base, "--quiet"]
        seconds, _ = _run(command, _env(opts))
        first = {"seconds": round(seconds, 1), "requests": sum(server.created_sizes),
                 "chunks": server.creates, "chunk_sizes": list(server.created_sizes),
                 "status_checks": server.polls, **_summary(out)}
        # Anthropic's API keeps no files: a batch's requests travel in its create.
        uploads, downloads = getattr(server, "uploads", server.creates), server.downloads
        seconds, proc = _run(command, _env(opts))
        again = {"seconds": round(seconds, 1), "new_chunks": server.creates - first["chunks"],
                 "new_uploads": getattr(server, "uploads", server.creates) - uploads,
                 "result_files_read": server.downloads - downloads,
                 "line": proc.stderr.strip().splitlines()[-1], **_summary(out)}
    return {"first": first, "restart": again}


def _sync(opts: argparse.Namespace, inputs: Path, out: Path) -> dict[str, Any]:
    anthropic = opts.provider == "anthropic"
    with AnthropicBatchServer(key=KEY) if anthropic else JudgeServer() as server:
        seconds, _ = _run(["run", "redteam", "--input", str(inputs), "--output-dir", str(out),
                           "--model", opts.model, "--api-base", server.api_base, "--quiet"],
                          _env(opts))
        calls = len(server.sync_bodies) if anthropic else server.calls
        return {"seconds": round(seconds, 1), "calls": calls, **_summary(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=2_000, help="batch_max_requests")
    parser.add_argument("--poll", type=float, default=0.25, help="batch_poll_seconds")
    parser.add_argument("--poll-max", type=float, default=2.0, help="batch_poll_max_seconds")
    parser.add_argument("--provider", choices=sorted(MODELS), default="openai",
                        help="the batch API: OpenAI-compatible files and batches, or "
                             "Anthropic's Message Batches")
    parser.add_argument("--model", help="the judge (default: per provider)")
    parser.add_argument("--skip-sync", action="store_true")
    opts = parser.parse_args()
    opts.model = opts.model or MODELS[opts.provider]
    report: dict[str, Any] = {"meta": meta(), "options": vars(opts)}
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "cases.jsonl"
        _write_cases(inputs, opts.cases)
        report["batch"] = _batch(opts, inputs, Path(tmp) / "batch")
        if not opts.skip_sync:
            report["sync"] = _sync(opts, inputs, Path(tmp) / "sync")
    _print(report)
    print("wrote", write_json("batch_api", report))


def _print(report: dict[str, Any]) -> None:
    first, again, sync = report["batch"]["first"], report["batch"]["restart"], report.get("sync")
    print(f"\n{report['meta']['date']}  {report['meta']['machine']}  "
          f"commit {report['meta']['commit']}  load {report['meta']['load_at_start']}")
    print("| run | cases judged | requests | batches | wall time | price |\n|---|---|---|---|---|---|")
    print(f"| run --batch-api | {first['judged']:,} | {first['requests']:,} | {first['chunks']} "
          f"({'+'.join(map(str, first['chunk_sizes']))}) | {first['seconds']} s "
          f"({first['status_checks']} status checks) | ${first['cost_usd']:.4f} |")
    print(f"| same command again (restart) | {again['judged']:,} | "
          f"{again['new_uploads']} new | {again['new_chunks']} new | {again['seconds']} s "
          f"({again['result_files_read']} result files read) | (already paid) |")
    if sync:
        ratio = first["cost_usd"] / sync["cost_usd"] if sync["cost_usd"] else float("nan")
        same = (sync["judged"], sync["unsafe"]) == (first["judged"], first["unsafe"])
        print(f"| synchronous run | {sync['judged']:,} | {sync['calls']:,} calls | - | "
              f"{sync['seconds']} s | ${sync['cost_usd']:.4f} |")
        print(f"\nbatch price / synchronous price: {ratio:.3f}; verdicts "
              f"{'identical counts' if same else 'DIFFER'} ({first['unsafe']} UNSAFE)")


if __name__ == "__main__":
    main()
