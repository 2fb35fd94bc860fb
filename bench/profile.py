"""Sample a running worker with py-spy and summarise where its CPU goes.

    prof = start(pid, seconds=15, out=Path("bench/results/ceiling.guardrail.txt"))
    ...                                   # the worker works
    summary = finish(prof)                # {"samples": .., "top_self": [..], "top_total": [..]}
    python bench/profile.py FILE          # summarise a saved collapsed-stack file

py-spy (``pip install py-spy``) writes collapsed stacks (``--format raw``);
each frame is ``function (file:line)``. "self" is where the CPU was when
sampled; "total" is every sample a function was on the stack for. Only
non-idle samples are taken, so percentages are of the worker's busy time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


@dataclass
class Profiling:
    proc: subprocess.Popen[bytes] | None
    out: Path


def available() -> bool:
    return shutil.which("py-spy") is not None


def start(pid: int, seconds: float, out: Path, rate: int = 100) -> Profiling:
    """Record ``pid`` for ``seconds`` in the background (no-op without py-spy)."""
    if not available():
        return Profiling(None, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration",
                             str(int(seconds)), "--rate", str(rate), "--format", "raw",
                             "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Profiling(proc, out)


def finish(prof: Profiling, timeout: float = 60) -> dict[str, Any] | None:
    if prof.proc is None:
        return None
    try:
        prof.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        prof.proc.terminate()
        prof.proc.wait(10)
    return summarize(prof.out) if prof.out.exists() else None


def _short(frame: str) -> str:
    found = _FRAME.match(frame.strip())
    if not found:
        return frame.strip()
    path = found.group("file")
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{found.group('func')} ({path})"


def _group(frame: str) -> str:
    """The package a frame belongs to (litellm, faust, aiokafka, guardrail, asyncio ...)."""
    path = frame[frame.rfind("(") + 1:-1]
    return path.split("/", 1)[0].removesuffix(".py") if "/" in path else path


def summarize(path: Path, top: int = 15) -> dict[str, Any]:
    """Top functions by self and total samples, and busy time by package."""
    own, total, packages = Counter(), Counter(), Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
        for pkg in {_group(f) for f in frames}:
            packages[pkg] += n

    def pct(counter: Counter) -> list[tuple[str, float]]:
        return [(k, round(100 * v / samples, 1)) for k, v in counter.most_common(top)]

    return {"samples": samples, "top_self": pct(own), "top_total": pct(total),
            "packages_total": pct(packages)}


def show(summary: dict[str, Any] | None, title: str) -> None:
    if not summary:
        print(f"[{title}] no profile (py-spy missing?)")
        return
    print(f"[{title}] {summary['samples']} busy samples")
    for key in ("packages_total", "top_total", "top_self"):
        print(f"  {key}:")
        for name, share in summary[key][:12]:
            print(f"    {share:5.1f}%  {name}")


if __name__ == "__main__":
    show(summarize(Path(sys.argv[1])), sys.argv[1])
