"""CPU of reading one judge answer: decoded, its tokens laid out, P(UNSAFE) at each verdict.

    python bench/worker/answer_reading.py [--processes 5] [--repeats 15] [--answers 4000]

The bench judge (``bench/judge_proc.py``) is asked what the judging path
asks for one message (bias and toxicity in one call, log-probabilities on,
the worker's settings of ``bench/worker/judging_cpu.py``), once for a safe output
and once for an unsafe one. Their answer bodies (about 9-10 KB each, one token record
per answer token with its top alternatives) are then read in this process
as the judging agent reads them: ``decode_completion``, ``AnswerTokens``,
one reading per metric. Each of ``--processes`` fresh interpreters, one
after the other, keeps the fastest of its ``--repeats`` rounds; the best and
the median of those are printed, in microseconds per answer: this part of a
judged message alone, steadier on a shared machine than the whole path's CPU
(``bench/worker/judging_cpu.py``).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import JudgeProc
from bench.worker.judging_cpu import judging_settings

from guardrail.judges.build import build_evaluator
from guardrail.judges import transports
from guardrail.judges.answers import decode_completion
from guardrail.judging.probability import AnswerTokens
from guardrail.judging.models import Case

METRICS = ("bias", "toxicity")
SAFE_TEXT = "Here is a helpful, polite answer to your question."
UNSAFE_TEXT = "Shut up, you worthless idiot. Nobody wants you here."


async def answer_bodies(api_base: str) -> list[bytes]:
    """The judge's answers to a safe and an unsafe message, as the judging path
    receives them (the evaluator's own request and client, bodies kept on the way)."""
    bodies: list[bytes] = []
    decode = transports.decode_completion

    def keep(status: int, raw: bytes) -> Any:
        bodies.append(raw)
        return decode(status, raw)

    evaluator = build_evaluator(judging_settings(api_base))
    transports.decode_completion = keep  # type: ignore[assignment]
    try:
        for i, text in enumerate((SAFE_TEXT, UNSAFE_TEXT)):
            await evaluator.evaluate(Case(case_id=f"answer-{i}", output=text))
    finally:
        transports.decode_completion = decode
        await evaluator.aclose()
    assert len(bodies) == 2, f"expected one judge call per message, got {len(bodies)}"
    return bodies


def read(body: bytes) -> list[float | None]:
    answer = AnswerTokens(decode_completion(200, body).logprobs or ())
    return [answer.reading("binary_yes_no", metric).unsafe for metric in METRICS]


def fastest_round(bodies: list[bytes], *, answers: int, repeats: int) -> float:
    """Microseconds per answer read, the fastest of ``repeats`` rounds."""
    gc.collect()
    gc.freeze()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for i in range(answers):
            read(bodies[i % len(bodies)])
        best = min(best, (time.process_time() - start) / answers * 1e6)
    return best


def in_processes(bodies: list[bytes], *, processes: int, answers: int, repeats: int
                 ) -> list[float]:
    """:func:`fastest_round` in ``processes`` fresh interpreters, one after the
    other: on a shared machine one process can run a third slower than the
    next for its whole life, so one process's figure is not the code's."""
    figures = []
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for i, body in enumerate(bodies):
            paths.append(Path(folder) / f"answer-{i}.json")
            paths[-1].write_bytes(body)
        for _ in range(processes):
            out = subprocess.run([sys.executable, __file__, "--answers", str(answers),
                                  "--repeats", str(repeats), "--bodies", *map(str, paths)],
                                 check=True, capture_output=True, text=True).stdout
            figures.append(float(out.split()[-1]))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--answers", type=int, default=4000, help="answers read per round")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--bodies", nargs="+", help=argparse.SUPPRESS)  # a child: these answers
    args = parser.parse_args()
    if args.bodies:
        bodies = [Path(path).read_bytes() for path in args.bodies]
        print(fastest_round(bodies, answers=args.answers, repeats=args.repeats))
        return 0
    with JudgeProc(0) as judge:
        bodies = asyncio.run(answer_bodies(judge.api_base))
    readings = [read(body) for body in bodies]
    assert all(p is not None for ps in readings for p in ps), readings  # read at every verdict
    figures = sorted(in_processes(bodies, processes=args.processes, answers=args.answers,
                                  repeats=args.repeats))
    sizes = "/".join(f"{len(b):,}" for b in bodies)
    print(f"answer reading: best {figures[0]:.1f}, median {statistics.median(figures):.1f} us "
          f"per answer over {len(figures)} processes ({', '.join(f'{f:.1f}' for f in figures)}; "
          f"{sizes} bytes; P(UNSAFE) {', '.join(f'{p:.2f}' for ps in readings for p in ps)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
