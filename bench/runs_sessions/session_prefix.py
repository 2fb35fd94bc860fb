"""Judge prompt characters per 1,000 session turns, with and without a prefix-caching judge.

    python bench/runs_sessions/session_prefix.py [--turns 1000] [--session-turns 12] [--every 3]

Synthetic sessions (seeded: a user message of ~40 words and an answer of ~150
words a turn) are judged as ``session_judge_every`` does: after every
``--every`` turns and at the last turn, each judgment one group prompt of the
session rubrics over the whole transcript (``session_max_chars`` 24,000). A
prefix-caching judge reads anew only what follows the prefix a prompt shares
with the session's judgment before it (the first judgment of a session: what
follows the static rubric part, shared with every session). Tokens are
characters / 4, the usual estimate for English; no judge is called.
"""

from __future__ import annotations

import argparse
import random

from guardrail.assembly.sessions import Turn
from guardrail.assembly.sessions.prefix import PrefixShare, session_prompts, shared_prefix

WORDS = ("the account order invoice plan refund delivery weather schedule project report "
         "meeting budget code test server answer question because which would could please "
         "thanks about with from into over under again still also").split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def session(rng: random.Random, index: int, turns: int) -> list[Turn]:
    return [Turn(turn_id=f"s{index}-t{n}", started_ms=1_700_000_000_000 + n * 60_000,
                 user=_text(rng, rng.randint(20, 60)), answer=_text(rng, rng.randint(80, 220)))
            for n in range(turns)]


def measure(turns: int, session_turns: int, every: int, max_chars: int) -> PrefixShare:
    rng = random.Random(37)
    total = shared = judgments = 0
    first_prompt = None
    for index in range(max(1, turns // session_turns)):
        prompts = session_prompts(session(rng, index, session_turns), session_id=f"s{index}",
                                  every=every, max_chars=max_chars)
        within = sum(shared_prefix(a, b) for a, b in zip(prompts, prompts[1:]))
        across = shared_prefix(first_prompt, prompts[0]) if first_prompt else 0
        first_prompt = first_prompt or prompts[0]
        total += sum(len(p) for p in prompts)
        shared += within + across
        judgments += len(prompts)
    return PrefixShare(judgments, total, shared)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--session-turns", type=int, default=12)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--max-chars", type=int, default=24_000)
    args = parser.parse_args()
    share = measure(args.turns, args.session_turns, args.every, args.max_chars)
    print(f"{args.turns} turns in sessions of {args.session_turns}, judged every "
          f"{args.every}: {share.judgments} judgments")
    print(f"prompt characters: {share.prompt_chars:,}; shared with the judgment before: "
          f"{share.shared_chars:,} ({share.share:.1%})")
    print(f"judge input tokens per 1,000 turns (chars/4): without a prefix cache "
          f"{share.prompt_chars / 4 * 1000 / args.turns:,.0f}; with one, read anew "
          f"{share.fresh_chars / 4 * 1000 / args.turns:,.0f}")


if __name__ == "__main__":
    main()
