"""4. Judge calls, tokens and cost per message, for the default rubrics in every scoring mode.

    python bench/judge/tokens.py [--judge-calls per_message|per_metric|both]

Input tokens are litellm's count (``token_counter``) of the real rendered
prompts (``guardrail.batch.estimate``: the exact system + user messages; one call
per message, or one per metric with ``judge_calls=per_metric``); output tokens
are ``EXPECTED_OUTPUT_TOKENS`` per metric. "cacheable" is the static prefix of
those input tokens (system text, rubrics with their examples, answer
instructions), the part a provider's prompt cache can serve. Full-price input
tokens are counted twice: behind a prefix cache (input minus the cacheable
prefix: what llama.cpp or vLLM read anew, and what any provider that caches
the prefix bills at the full rate) and on the model's own provider as
guardrail calls it (OpenAI caches only prompts of 1,024+ tokens; Anthropic only
behind a ``cache_control`` breakpoint, which guardrail does not send). Prices
come from litellm's bundled cost map (offline), in full; a model missing from
it is said to be unpriced, never $0. Three judged outputs: a one-liner, a
typical ~100-word answer and a long ~400-word one. Targets, for the typical
answer with one call per message: 1 judge call (issue 11) and <= 600 input
tokens per message at full price behind a prefix cache (issue 11's target,
counted as issue 12 asks: the rubric examples sit in the cacheable prefix).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import meta, print_table, row, write_json  # noqa: E402
from guardrail.providers.litellm import price_tokens  # noqa: E402
from guardrail.batch.estimate import OPENAI_MIN_CACHED_PROMPT, estimate_case  # noqa: E402
from guardrail.judging.evaluate import Evaluator  # noqa: E402
from guardrail.judges.llm import LLMJudge  # noqa: E402
from guardrail.judging.models import Case, RedteamConfig  # noqa: E402
from guardrail.config.settings import Settings  # noqa: E402

#: claude-3-5-haiku-20241022 is no longer in litellm's bundled map under
#: ``anthropic/``; its successor is, so that is what is priced.
MODELS = ("openai/gpt-4o-mini", "anthropic/claude-haiku-4-5")
MODES = (("binary_yes_no", False), ("binary_yes_no", True), ("scale_1_5", False),
         ("scale_1_5", True))
TARGET = 600

_SENTENCE = ("The central theme of the play is mortality, and the prince keeps returning to "
             "what it means to act when every choice seems to lead to loss. ")
OUTPUTS = {"one-liner": "Thanks for asking, the meeting moved to 3 pm on Thursday.",
           "typical": (_SENTENCE * 4).strip(),       # ~100 words
           "long": (_SENTENCE * 16).strip()}         # ~400 words


def provider_full_price(model: str, input_tokens: int, prefix: int) -> int:
    """Input tokens the model's provider bills at the full rate, as guardrail calls
    it: OpenAI serves the prefix from cache only for prompts of 1,024+ tokens (per
    call; here one call per message or per metric), Anthropic never without a
    ``cache_control`` breakpoint."""
    if model.startswith("openai/") and input_tokens >= OPENAI_MIN_CACHED_PROMPT:
        return input_tokens - prefix
    return input_tokens


def per_message(model: str, mode: str, reasoning: bool, output: str,
                calls: str) -> dict[str, Any]:
    settings = Settings(judge_model=model, judge_calls=calls,
                        redteam=RedteamConfig(scoring_mode=mode, include_reasoning=reasoning))
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation)
    est = estimate_case(Case(case_id="bench", output=output), evaluator, model=model)
    cost = price_tokens(model, est.input_tokens, est.output_tokens)
    per_call = est.input_tokens // max(1, est.calls)
    provider = (est.input_tokens if per_call < OPENAI_MIN_CACHED_PROMPT
                else provider_full_price(model, est.input_tokens, est.cached_prefix_tokens))
    return {"calls": est.calls, "input_tokens": est.input_tokens,
            "cacheable_tokens": est.cached_prefix_tokens,
            "full_price_cached_prefix": est.input_tokens - est.cached_prefix_tokens,
            "full_price_on_provider": provider, "output_tokens": est.output_tokens,
            "usd_per_1k_messages": None if cost is None else round(cost * 1000, 4)}


def measure(modes: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for calls in modes:
        for model in MODELS:
            for mode, reasoning in MODES:
                for name, text in OUTPUTS.items():
                    out.append({"judge_calls": calls, "model": model, "mode": mode,
                                "reasoning": reasoning, "output": name,
                                "output_words": len(text.split()),
                                **per_message(model, mode, reasoning, text, calls)})
    return out


def show(runs: list[dict[str, Any]]) -> None:
    print("| judge_calls | model | mode | reasoning | output | calls | input tok (cacheable) "
          "| full price: behind a prefix cache / this provider | output tok | $ / 1k msgs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        usd = "unpriced" if r["usd_per_1k_messages"] is None else f"{r['usd_per_1k_messages']:.4f}"
        print(f"| {r['judge_calls']} | {r['model']} | {r['mode']} | {r['reasoning']} | "
              f"{r['output']} ({r['output_words']} w) | {r['calls']} | {r['input_tokens']} "
              f"({r['cacheable_tokens']}) | {r['full_price_cached_prefix']} / "
              f"{r['full_price_on_provider']} | {r['output_tokens']} | {usd} |")


def rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for calls in dict.fromkeys(r["judge_calls"] for r in runs):
        out += _rows([r for r in runs if r["judge_calls"] == calls], calls)
    return out


def _rows(runs: list[dict[str, Any]], calls: str) -> list[dict[str, Any]]:
    typical = [r for r in runs if r["output"] == "typical"]
    worst = max(typical, key=lambda r: r["input_tokens"])
    cheap = min(typical, key=lambda r: r["input_tokens"])
    prices = {m: [r["usd_per_1k_messages"] for r in typical if r["model"] == m]
              for m in MODELS}
    price_text = "; ".join(f"{m.split('/')[-1]} ${min(p):.3f}-{max(p):.3f}/1k msgs"
                           for m, p in prices.items() if p and None not in p)
    default = next(r for r in typical if r["mode"] == "binary_yes_no" and not r["reasoning"])
    judge_calls = {r["calls"] for r in typical}
    return [row(f"4 judge calls / msg, {calls} (bias+toxicity)",
                "/".join(str(c) for c in sorted(judge_calls)), "1",
                1 / max(judge_calls), judge_calls == {1}),
            row(f"4 tokens in / msg, {calls} (bias+toxicity, ~100-word output)",
                f"{default['full_price_cached_prefix']} at full price behind a prefix cache "
                f"of {default['cacheable_tokens']} ({default['input_tokens']} in by default, "
                f"all at full price where nothing caches); all modes "
                f"{cheap['input_tokens']}-{worst['input_tokens']} in, "
                f"{cheap['output_tokens']}-{worst['output_tokens']} out; {price_text}",
                f"<= {TARGET} in at full price", TARGET / default["full_price_cached_prefix"],
                default["full_price_cached_prefix"] <= TARGET)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge-calls", choices=("per_message", "per_metric", "both"),
                        default="both")
    args = parser.parse_args()
    modes = (("per_message", "per_metric") if args.judge_calls == "both"
             else (args.judge_calls,))
    info = meta()  # load and commit before the run
    runs = measure(modes)
    show(runs)
    table = rows(runs)
    print_table(table, info)
    write_json("tokens", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
