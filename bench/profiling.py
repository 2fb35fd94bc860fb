"""Sample a running worker with py-spy and summarise where its CPU goes.

    prof = start(pid, seconds=15, out=Path("bench/results/ceiling.guardrail.txt"))
    ...                                   # the worker works
    summary = finish(prof)                # {"samples": .., "top_self": [..], "top_total": [..]}
    python bench/profiling.py FILE          # summarise a saved collapsed-stack file
    python bench/profiling.py FILE --parts 1.44   # ... and split a judged message's 1.44 ms
    python bench/profiling.py FILE --run-parts 1.24   # ... or a span's on the agent-run path

``--parts`` puts each busy sample of a judging worker in the first part of
:data:`PARTS` its stack matches (the table on the performance page's
"CPU per judged message"), ``--run-parts`` in those of :data:`RUN_PARTS` (its
"Agent runs" section); with a CPU per message given, the shares turn into
milliseconds.

py-spy (``pip install py-spy``) writes collapsed stacks (``--format raw``);
each frame is ``function (file:line)``. "self" is where the CPU was when
sampled; "total" is every sample a function was on the stack for. Only
non-idle samples are taken, so percentages are of the worker's busy time.
"""

from __future__ import annotations

import re
import shutil
import signal
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


def stop(prof: Profiling) -> dict[str, Any] | None:
    """Stop a recording now (py-spy writes what it has on SIGINT), then :func:`finish`."""
    if prof.proc is not None and prof.proc.poll() is None:
        prof.proc.send_signal(signal.SIGINT)
    return finish(prof)


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


#: A judged message's parts, first match wins: (name, file prefixes one frame must start with).
PARTS = (
    ("the judge's answer: decoding, log-probabilities, verdict tokens",
     ("guardrail/judges/answers.py", "guardrail/judging/probability.py")),
    ("the judge call's HTTP", ("guardrail/judges/http1.py", "aiohttp/")),
    ("the windows agent", ("guardrail/agents/windows.py",)),
    ("the rest of judging: prompt, scoring, result and judgment records",
     ("guardrail/",)),
    ("Faust, aiokafka and mode: fetching, producing, committing",
     ("faust/", "aiokafka/", "mode/")),
)
#: A span's parts on the agent-run path, first match wins (the judging agent
#: decodes it and sends it on bundled; the assembler keeps it in its table
#: until its run is judged; the sweep ticks; the run is judged and closed).
RUN_PARTS = (
    ("judging (prompt, judge call, answer; a run's case)",
     ("guardrail/judging/evaluate.py", "guardrail/judges/")),
    ("decoding OTLP and reading spans",
     ("guardrail/formats/", "guardrail/assembly/runs/span_reading.py",
      "guardrail/stream/envelope.py")),
    ("the assembler's own work (spans into the table, ticks, building the case)",
     ("guardrail/agents/assembly.py", "guardrail/assembly/base.py", "guardrail/assembly/runs/")),
    ("producing through Faust and aiokafka (results, run spans, changelog, ticks, done)",
     ("faust/topics.py", "faust/tables/", "aiokafka/producer/", "guardrail/stream/item_bundles.py",
      "aiokafka/partitioner.py")),
    ("the windows agent", ("guardrail/agents/windows.py",)),
    ("consuming through Faust, stream iteration, the rest of guardrail",
     ("faust/", "aiokafka/", "mode/", "guardrail/")),
)
#: guardrail frames every worker stack holds, or that are Faust's consumer, not judging.
_NOT_JUDGING = ("guardrail/agents/runner.py", "guardrail/cli", "guardrail/__main__",
                "guardrail/agents/consumer.py", "guardrail/agents/transport.py",
                "guardrail/agents/lost_records.py", "guardrail/agents/liveness.py")
_IDLE = ("EpollSelector.select", "select (selectors.py")


def parts(path: Path, table: tuple[tuple[str, tuple[str, ...]], ...] = PARTS
          ) -> dict[str, float]:
    """Each part's share of the busy samples (an idle wait in ``select`` left out).

    Every sample counts: a task's stack often starts at its coroutine, without
    the event loop's frames, so record only once the process is serving."""
    counts: Counter = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or stack.rsplit(";", 1)[-1].startswith(_IDLE):
            continue
        files = [_short(f).rpartition("(")[2].rstrip(")") for f in stack.split(";")]
        files = [f for f in files if not f.startswith(_NOT_JUDGING)]
        name = next((part for part, prefixes in table
                     if any(f.startswith(prefixes) for f in files)), "the event loop and the rest")
        counts[name] += int(count)
    busy = sum(counts.values()) or 1
    return {name: counts[name] / busy for name, _ in (*table, ("the event loop and the rest", ()))}


def show_parts(shares: dict[str, float], what: str, cpu_ms: float | None) -> None:
    """Print :func:`parts`' shares, in milliseconds too when ``cpu_ms`` is given."""
    print(f"  parts of {what}:")
    for name, share in shares.items():
        ms = f" = {share * cpu_ms:.2f} ms" if cpu_ms else ""
        print(f"    {100 * share:5.1f}%{ms}  {name}")


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
    for flag, table, what in (("--parts", PARTS, "a judged message"),
                              ("--run-parts", RUN_PARTS, "a span on the agent-run path")):
        if flag in sys.argv:
            given = sys.argv[sys.argv.index(flag) + 1:]
            show_parts(parts(Path(sys.argv[1]), table), what, float(given[0]) if given else None)
