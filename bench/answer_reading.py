"""CPU of reading one judge answer: decoded, its tokens laid out, P(UNSAFE) at each verdict.

    python bench/answer_reading.py [--repeats 15] [--answers 4000]

The bench judge (``bench/judge_proc.py``) is asked what the judging path
asks for one message (bias and toxicity in one call, log-probabilities on,
the worker's settings of ``bench/judging_cpu.py``), once for a safe output
and once for an unsafe one. Their answer bodies (about 9-10 KB each, one token record
per answer token with its top alternatives) are then read in this process
as the judging agent reads them: ``decode_completion``, ``AnswerTokens``,
one reading per metric. Prints the fastest of ``--repeats`` rounds in
microseconds per answer: this part of a judged message alone, steadier on a
shared machine than the whole path's CPU (``bench/judging_cpu.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from common import JudgeProc
from judging_cpu import judging_settings

from guardrail.evaluate import build_evaluator
from guardrail.judges import transports
from guardrail.judges.answers import decode_completion
from guardrail.judges.probability import AnswerTokens
from guardrail.models import Case

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--answers", type=int, default=4000, help="answers read per round")
    args = parser.parse_args()
    with JudgeProc(0) as judge:
        bodies = asyncio.run(answer_bodies(judge.api_base))
    readings = [read(body) for body in bodies]
    assert all(p is not None for ps in readings for p in ps), readings  # read at every verdict
    micros = fastest_round(bodies, answers=args.answers, repeats=args.repeats)
    sizes = "/".join(f"{len(b):,}" for b in bodies)
    print(f"answer reading: {micros:.1f} us per answer ({sizes} bytes; P(UNSAFE) "
          f"{', '.join(f'{p:.2f}' for ps in readings for p in ps)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
