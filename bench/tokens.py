"""4. Tokens and cost per message, for the default rubrics in every scoring mode.

    python bench/tokens.py

Input tokens are litellm's count (``token_counter``) of the real rendered
prompts (``guardrail.estimate``: the exact system + user messages, one call
per metric); output tokens are ``EXPECTED_OUTPUT_TOKENS`` per call. Prices come
from litellm's bundled cost map (offline); a model missing from it is said to
be unpriced, never $0. Three judged outputs: a one-liner, a typical ~100-word
answer and a long ~400-word one. Target: <= 1,200 input tokens per message
(bias + toxicity) for the typical answer.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from common import meta, print_table, row, write_json  # noqa: E402
from guardrail._litellm import price_tokens  # noqa: E402
from guardrail.estimate import estimate_case  # noqa: E402
from guardrail.evaluate import Evaluator  # noqa: E402
from guardrail.judge import LLMJudge  # noqa: E402
from guardrail.models import Case, RedteamConfig  # noqa: E402
from guardrail.settings import Settings  # noqa: E402

#: claude-3-5-haiku-20241022 is no longer in litellm's bundled map under
#: ``anthropic/``; its successor is, so that is what is priced.
MODELS = ("openai/gpt-4o-mini", "anthropic/claude-haiku-4-5")
MODES = (("binary_yes_no", False), ("binary_yes_no", True), ("scale_1_5", False),
         ("scale_1_5", True))
TARGET = 1200

_SENTENCE = ("The central theme of the play is mortality, and the prince keeps returning to "
             "what it means to act when every choice seems to lead to loss. ")
OUTPUTS = {"one-liner": "Thanks for asking, the meeting moved to 3 pm on Thursday.",
           "typical": (_SENTENCE * 4).strip(),       # ~100 words
           "long": (_SENTENCE * 16).strip()}         # ~400 words


def per_message(model: str, mode: str, reasoning: bool, output: str) -> dict[str, Any]:
    settings = Settings(judge_model=model,
                        redteam=RedteamConfig(scoring_mode=mode, include_reasoning=reasoning))
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation)
    est = estimate_case(Case(case_id="bench", output=output), evaluator, model=model)
    cost = price_tokens(model, est.input_tokens, est.output_tokens)
    return {"calls": est.calls, "input_tokens": est.input_tokens,
            "output_tokens": est.output_tokens,
            "usd_per_1k_messages": None if cost is None else round(cost * 1000, 4)}


def measure() -> list[dict[str, Any]]:
    out = []
    for model in MODELS:
        for mode, reasoning in MODES:
            for name, text in OUTPUTS.items():
                out.append({"model": model, "mode": mode, "reasoning": reasoning,
                            "output": name, "output_words": len(text.split()),
                            **per_message(model, mode, reasoning, text)})
    return out


def show(runs: list[dict[str, Any]]) -> None:
    print("| model | mode | reasoning | output | input tok | output tok | $ / 1k msgs |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        usd = "unpriced" if r["usd_per_1k_messages"] is None else f"{r['usd_per_1k_messages']:.4f}"
        print(f"| {r['model']} | {r['mode']} | {r['reasoning']} | {r['output']} "
              f"({r['output_words']} w) | {r['input_tokens']} | {r['output_tokens']} | {usd} |")


def rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    typical = [r for r in runs if r["output"] == "typical"]
    worst = max(typical, key=lambda r: r["input_tokens"])
    cheap = min(typical, key=lambda r: r["input_tokens"])
    prices = {m: [r["usd_per_1k_messages"] for r in typical if r["model"] == m]
              for m in MODELS}
    price_text = "; ".join(f"{m.split('/')[-1]} ${min(p):.3f}-{max(p):.3f}/1k msgs"
                           for m, p in prices.items() if p and None not in p)
    return [row("4 tokens in / msg (bias+toxicity, ~100-word output)",
                f"{cheap['input_tokens']}-{worst['input_tokens']} in, "
                f"{cheap['output_tokens']}-{worst['output_tokens']} out; {price_text}",
                f"<= {TARGET} in", TARGET / worst["input_tokens"],
                worst["input_tokens"] <= TARGET)]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    info = meta()  # load and commit before the run
    runs = measure()
    show(runs)
    table = rows(runs)
    print_table(table, info)
    write_json("tokens", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
