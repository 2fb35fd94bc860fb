"""Guard model first: what reaches the strong (rubric) judge, per 1,000 messages.

    python bench/judge/guard_cascade.py [--messages 1000] [--unsafe 0.10] [--unsure 0.04]
                                  [--strong-model openai/gpt-4o-mini] [--seed 7]

The same traffic — ``case`` JSON messages, a user question and an answer each,
every answer distinct — goes through the worker's judging path
(``build_evaluator`` + ``MessageJudge.process`` in batches of 64, no Kafka) in
four configurations:

- (a) the rubric judge alone (``judge_protocol: rubric``);
- (b) a Llama Guard stand-in first, the rubric judge second, ``escalate_on: unsure``;
- (c) the same with ``escalate_on: unsafe``;
- (d) the same with ``escalate_on: both``.

Both judges are stand-ins on loopback. The rubric judge is the rule judge
(``guardrail.local.rule_judge.JudgeServer``: UNSAFE on words such as "idiot"
or "those people are", usage ~ characters / 4). The guard is the stand-in of
``tests/support/guard_server.py`` answering as Llama Guard 3 does (``safe``, or
``unsafe`` + ``S10``, with the first token's top log-probabilities):
P(unsafe) 0.90-0.99 on the rule judge's words, 0.25-0.75 on a few milder
words (the unsure band), 0.01-0.06 otherwise. Its reported prompt tokens are
litellm's count of the turns it got plus ``TEMPLATE_TOKENS`` for the fixed text
the Llama Guard 3 chat template wraps them in.

Calls and tokens are tallied at each judge's transport, from the usage the
stand-in reports per call; the strong judge's price is litellm's bundled cost
map for ``--strong-model`` (the stand-in ignores the name). "differ from (a)"
counts metric verdicts that differ from configuration (a). Figures only: the
script prints and writes ``bench/results/guard_cascade-*.json``; it checks
nothing.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import random
import time
import zlib
from collections import Counter
from typing import Any

import litellm
import orjson
from bench.common import meta, write_json

from guardrail.providers.litellm import price_tokens
from guardrail.judges.cascade import escalation_judge_settings
from guardrail.judges.build import build_evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.judges import GuardJudge, make_guard_transport
from guardrail.local.rule_judge import DEFAULT_TRIGGERS, JudgeServer
from guardrail.config.settings import Settings, load_settings
from guardrail.stream.envelope import Source
from guardrail.stream.processing import MessageJudge, RawMessage
from guardrail.judges.transports import Completion, make_transport
from tests.support.guard_server import Answer, GuardServer, llama  # common: repo on sys.path

#: Tokens of the fixed text Llama Guard 3's chat template puts around the turns
#: (task line, the 14 hazard names, conversation markers, answer instructions,
#: special tokens): litellm's default tokenizer over that text is 194, plus
#: about one token per special token. Llama's own tokenizer differs a little.
TEMPLATE_TOKENS = 200
#: The words the guard stand-in flags with confidence: the rule judge's own.
FLAGGED = DEFAULT_TRIGGERS["toxicity"] | DEFAULT_TRIGGERS["bias"]
#: Milder words the guard is unsure about (P(unsafe) inside the default band).
BORDERLINE = ("dumb", "pathetic", "clueless")
BATCH = 64
CONFIGS = {"a": ("rubric judge alone", None), "b": ("guard → rubric, escalate_on: unsure",
                                                   "unsure"),
           "c": ("guard → rubric, escalate_on: unsafe", "unsafe"),
           "d": ("guard → rubric, escalate_on: both", "both")}

QUESTIONS = ("How do I reset my router?", "Can you check why my invoice is higher?",
             "What is the fastest way to back up my laptop?",
             "Why does the app log me out every hour?",
             "Which plan should I pick for a team of five?",
             "How do I move my contacts to the new phone?")
NEUTRAL = ("Open the settings page and choose the network tab.",
           "The change takes effect after a restart, usually within two minutes.",
           "Your last three invoices include the add-on you enabled in March.",
           "An external drive or the cloud backup both work; the cloud one runs nightly.",
           "Sessions end after an hour when the remember-me box is left unticked.",
           "For five people the team plan is cheaper than five single licences.",
           "Export the contacts as a file first, then import it on the new phone.",
           "If the light keeps blinking orange, the line itself is down.",
           "You can switch plans at any time; the difference is prorated.",
           "Let me know if anything in these steps is unclear.")
INSULTS = ("Honestly, only an idiot would miss that.", "Read the manual next time, you moron.",
           "That was a stupid question.")
BIASED = ("Those people are always late with their payments.",
          "All women are hopeless at this kind of setup.")
MILD = ("Frankly, that was a dumb way to set it up.", "The old configuration was pathetic.",
        "Your team seems clueless about backups.")


# --- the traffic -------------------------------------------------------------------

def traffic(n: int, unsafe: float, unsure: float, seed: int) -> list[bytes]:
    """``n`` case messages: ``unsafe`` of them with a flagged sentence (seven in
    ten insults, three in ten biased), ``unsure`` with a milder one, the rest
    neutral; each answer 2-6 sentences with its own ticket number."""
    rng = random.Random(seed)
    flagged, mild = round(n * unsafe), round(n * unsure)
    insults = round(flagged * 0.7)
    kinds = (["insult"] * insults + ["bias"] * (flagged - insults) + ["mild"] * mild
             + ["neutral"] * (n - flagged - mild))
    rng.shuffle(kinds)
    extra = {"insult": INSULTS, "bias": BIASED, "mild": MILD, "neutral": ()}
    messages = []
    for i, kind in enumerate(kinds):
        body = rng.sample(NEUTRAL, rng.randint(2, 6))
        if extra[kind]:
            body.insert(rng.randint(0, len(body)), rng.choice(extra[kind]))
        output = f"Ticket #{i:05d}: " + " ".join(body)
        messages.append(orjson.dumps({"case_id": f"c{i:05d}", "input": rng.choice(QUESTIONS),
                                      "output": output}))
    return messages


# --- the guard stand-in ------------------------------------------------------------

def guard_probability(text: str) -> float:
    """P(unsafe) the stand-in guard gives an answer, spread by a hash of the text."""
    low, spread = text.lower(), (zlib.crc32(text.encode()) % 1000) / 1000
    if any(word in low for word in FLAGGED):
        return 0.90 + 0.09 * spread
    if any(word in low for word in BORDERLINE):
        return 0.25 + 0.50 * spread
    return 0.01 + 0.05 * spread


def guard_answer(body: dict[str, Any]) -> Answer:
    """Llama Guard 3's answer to the last turn (the judged answer)."""
    return llama(guard_probability(body["messages"][-1]["content"]))


def template_usage(body: dict[str, Any], answer: Answer) -> tuple[int, int]:
    """What a server running the real template would count: the turns it got plus
    the template's fixed text; the answer's tokens and end-of-turn."""
    text = "\n\n".join(t["content"] for t in body["messages"])
    return (TEMPLATE_TOKENS + litellm.token_counter(model="gpt-4o-mini", text=text),
            len(answer.pieces) + 1)


def guard_stand_in() -> GuardServer:
    """The Llama Guard stand-in: an OpenAI-compatible chat endpoint on loopback."""
    server = GuardServer(answer=guard_answer)
    server.usage = template_usage
    return server


# --- counting at the transport -----------------------------------------------------

class Counted:
    """A judge's transport that tallies its calls and the usage its server reports."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = self.input_tokens = self.output_tokens = 0

    async def complete(self, messages: Any, response_format: Any,
                       max_tokens: int | None = None) -> Completion:
        done = await self.inner.complete(messages, response_format, max_tokens=max_tokens)
        self.calls += 1
        self.input_tokens += done.prompt_tokens
        self.output_tokens += done.completion_tokens
        return done

    def __getattr__(self, name: str) -> Any:  # name, asks_logprobs, is_transient, aclose …
        return getattr(self.inner, name)


def settings_for(on: str | None, guard: str, strong: str, strong_model: str) -> Settings:
    """(a): the rubric judge as ``judge_model``; else the guard first, escalating ``on``."""
    common = {"judge_api_key": "sk-bench", "judge_max_retries": 0, "judge_timeout": 30}
    if on is None:
        return load_settings(environ={}, judge_model=strong_model, judge_api_base=strong,
                             **common)
    return load_settings(environ={}, judge_model="openai/llama-guard-3", judge_api_base=guard,
                         judge_protocol="llama_guard", judge_input_cost_per_token=0.0,
                         judge_output_cost_per_token=0.0, escalate_model=strong_model,
                         escalate_api_base=strong, escalate_api_key="sk-bench",
                         escalate_on=on, **common)


def build(settings: Settings) -> tuple[Any, Counted, Counted | None]:
    """The evaluator with counting transports: (evaluator, strong, guard or None)."""
    if settings.escalation.model is None:
        strong = Counted(make_transport(settings.judge))
        return build_evaluator(settings, judge=LLMJudge(settings.judge, transport=strong)), \
            strong, None
    guard = Counted(make_guard_transport(settings.judge))
    second = escalation_judge_settings(settings.judge, settings.escalation)
    strong = Counted(make_transport(second))
    evaluator = build_evaluator(
        settings, judge=GuardJudge(settings.judge, "llama_guard", transport=guard),
        escalation_judge=LLMJudge(second, transport=strong))
    return evaluator, strong, guard


# --- one configuration -------------------------------------------------------------

async def run_config(on: str | None, messages: list[bytes], guard: str, strong: str,
                     strong_model: str) -> dict[str, Any]:
    """Judge every message in batches of 64; the tallies and each metric's verdict."""
    settings = settings_for(on, guard, strong, strong_model)
    evaluator, strong_count, guard_count = build(settings)
    judge = MessageJudge.from_settings(evaluator, settings, emit_judgments=False)
    started = time.perf_counter()
    try:
        verdicts = await judge_batches(judge, messages, settings.kafka.results_topic)
    finally:
        await evaluator.aclose()
    return {"seconds": round(time.perf_counter() - started, 2), "verdicts": verdicts,
            "strong": tally(strong_count), "guard": tally(guard_count),
            "stages": stage_counts(judge)}


async def judge_batches(judge: MessageJudge, messages: list[bytes],
                        results_topic: str) -> dict[tuple[str, str], str]:
    """Every message through the worker's judging path in batches of 64, one batch
    after another; each (case, metric)'s verdict, or ``ERROR``."""
    verdicts: dict[tuple[str, str], str] = {}
    for at in range(0, len(messages), BATCH):
        batch = [RawMessage(value, Source("bench", 0, at + i))
                 for i, value in enumerate(messages[at:at + BATCH])]
        for record in await judge.process(batch):
            if record.topic == results_topic:
                verdicts.update(read_verdicts(record.key, record.value))
    return verdicts


def read_verdicts(key: bytes | None, value: bytes) -> dict[tuple[str, str], str]:
    case = (key or b"").decode()
    record = orjson.loads(value)
    return {(case, m["name"]): (m["result"][0]["verdict"] if m.get("result") else "ERROR")
            for m in record["metrics"]}


def tally(counted: Counted | None) -> dict[str, int]:
    if counted is None:
        return {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    return {"calls": counted.calls, "input_tokens": counted.input_tokens,
            "output_tokens": counted.output_tokens}


def stage_counts(judge: MessageJudge) -> dict[str, int]:
    """``guardrail_stage_judgments_total`` by stage, as ``/metrics`` shows it."""
    counts: Counter[str] = Counter()
    for family in judge.telemetry.registry.collect():
        for sample in family.samples:
            if sample.name == "guardrail_stage_judgments_total":
                counts[sample.labels["stage"]] += int(sample.value)
    return dict(counts)


# --- the table ---------------------------------------------------------------------

def rows(runs: dict[str, dict[str, Any]], n: int, strong_model: str) -> list[dict[str, Any]]:
    """Per 1,000 messages: the strong judge's calls, tokens and price, its share of
    (a)'s tokens, the guard's calls and tokens, escalated judgments, differences."""
    scale, base = 1000 / n, runs["a"]
    base_tokens = base["strong"]["input_tokens"] + base["strong"]["output_tokens"]
    out = []
    for key, run in runs.items():
        strong, guard = run["strong"], run["guard"]
        price = price_tokens(strong_model, strong["input_tokens"], strong["output_tokens"])
        tokens = strong["input_tokens"] + strong["output_tokens"]
        differ = sum(v != base["verdicts"].get(k) for k, v in run["verdicts"].items())
        out.append({
            "config": f"({key}) {CONFIGS[key][0]}",
            "strong_calls": round(strong["calls"] * scale),
            "strong_input_tokens": round(strong["input_tokens"] * scale),
            "strong_output_tokens": round(strong["output_tokens"] * scale),
            "strong_share": tokens / base_tokens if base_tokens else None,
            "strong_usd": None if price is None else round(price * scale, 4),
            "guard_calls": round(guard["calls"] * scale),
            "guard_input_tokens": round(guard["input_tokens"] * scale),
            "escalated": round(run["stages"].get("escalated", 0) * scale),
            "differ": round(differ * scale)})
    return out


def print_table(table: list[dict[str, Any]], info: dict[str, Any], strong_model: str) -> None:
    print(f"\n{info['date']}  {info['machine']}  commit {info['commit']}  "
          f"load {info.get('load_at_start')}")
    print("| per 1,000 messages | strong-judge calls | strong-judge input / output tokens "
          f"| strong judge's share of (a) | strong judge at {strong_model} prices "
          "| guard calls (input tokens) | metric judgments escalated | verdicts differing "
          "from (a) |\n|---|---|---|---|---|---|---|---|")
    for r in table:
        usd = "unpriced" if r["strong_usd"] is None else f"${r['strong_usd']:.3f}"
        share = "-" if r["strong_share"] is None else f"{r['strong_share']:.0%}"
        print(f"| {r['config']} | {r['strong_calls']:,} | {r['strong_input_tokens']:,} / "
              f"{r['strong_output_tokens']:,} | {share} | {usd} | {r['guard_calls']:,} "
              f"({r['guard_input_tokens']:,}) | {r['escalated']:,} | {r['differ']:,} |")


async def main_async(args: argparse.Namespace) -> None:
    messages = traffic(args.messages, args.unsafe, args.unsure, args.seed)
    runs: dict[str, dict[str, Any]] = {}
    async with JudgeServer() as rubric, guard_stand_in() as guard:
        for key, (_, on) in CONFIGS.items():
            runs[key] = await run_config(on, messages, guard.api_base, rubric.api_base,
                                         args.strong_model)
            print(f"({key}) {CONFIGS[key][0]}: {runs[key]['seconds']} s", flush=True)
    info = {**meta(), "messages": args.messages, "unsafe_share": args.unsafe,
            "unsure_share": args.unsure, "seed": args.seed, "band": [0.2, 0.8]}
    table = rows(runs, args.messages, args.strong_model)
    print_table(table, info, args.strong_model)
    print(f"wrote {write_json('guard_cascade', {'meta': info, 'rows': table})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--unsafe", type=float, default=0.10,
                        help="share of answers with a word the rule judge flags")
    parser.add_argument("--unsure", type=float, default=0.04,
                        help="share of answers the guard is unsure about (P in the band)")
    parser.add_argument("--strong-model", default="openai/gpt-4o-mini",
                        help="the name the strong judge is priced as (litellm's cost map)")
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
