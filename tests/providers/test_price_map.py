"""Prices read from litellm's bundled map without importing litellm agree with
litellm's own, and a worker whose judge is posted to directly never imports it."""

import json
import os
import subprocess
import sys

import orjson
import pytest

from guardrail.providers import litellm as _litellm, price_map as _price_map
from guardrail.providers.litellm import litellm, price_tokens


def _bundled() -> dict:
    return _price_map._bundled_map()


def _entry(model: str) -> dict:
    return _price_map.price_entry(model)


def _plain_models() -> list[str]:
    """Every name of a plain entry the fast path answers: the map's keys and,
    for bare keys, the provider-prefixed name a judge_model spells."""
    names = []
    for key, entry in _bundled().items():
        if not isinstance(entry, dict) or key == "sample_spec":
            continue
        if _price_map.linear_prices(entry) is None:
            continue
        names.append(key)
        provider = entry.get("litellm_provider")
        if isinstance(provider, str) and "/" not in key:
            names.append(f"{provider}/{key}")
    return names


def _litellm_price(model: str, tokens_in: int, tokens_out: int, cached: int) -> float | None:
    try:
        prompt, completion = litellm().cost_per_token(
            model=model, prompt_tokens=tokens_in, completion_tokens=tokens_out,
            cache_read_input_tokens=cached)
    except Exception:
        return None
    return float(prompt) + float(completion)


def test_every_plain_entry_is_priced_as_litellm_prices_it():
    models = _plain_models()
    assert len(models) > 3000  # the map has thousands of plain chat models
    compared, differ = 0, []
    for model in models[::3]:  # a third of them: litellm takes seconds for all
        # Cached tokens where the map prices them (else guardrail charges them as
        # any input token, and says so: litellm guesses a discount for some).
        linear = _price_map.linear_prices(_entry(model))
        if linear is None:  # the prefixed name is an entry of its own, not plain
            continue
        cached = 200 if linear[2] is not None else 0
        theirs = _litellm_price(model, 1200, 300, cached)
        if theirs is None:  # litellm cannot route a few of its own entries
            continue
        _litellm._linear_prices.cache_clear()
        ours = price_tokens(model, 1200, 300, cached_tokens=cached)
        compared += 1
        if ours is None or abs(ours - theirs) > 1e-9 * max(1.0, theirs):
            differ.append((model, ours, theirs))
    assert compared > 1000 and differ == [], differ[:10]


@pytest.mark.parametrize("marker", ["input_cost_per_token_above_200k_tokens",
                                    "input_cost_per_token_cache_hit"])
def test_entries_priced_beyond_two_token_counts_are_left_to_litellm(marker):
    model = next(k for k, v in _bundled().items() if isinstance(v, dict) and marker in v
                 and "input_cost_per_token" in v and "output_cost_per_token" in v)
    assert _price_map.linear_prices(_bundled()[model]) is None
    _litellm._linear_prices.cache_clear()
    assert price_tokens(model, 250_000, 1000) == _litellm_price(model, 250_000, 1000, 0)


def test_a_model_the_map_does_not_know_has_no_price_not_zero():
    assert _price_map.price_entry("openai/no-such-judge-model") == {}
    assert price_tokens("openai/no-such-judge-model", 1000, 10) is None
    # The prefix must name the entry's own provider.
    assert _price_map.price_entry("anthropic/gpt-4o-mini") == {}


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "GUARDRAIL_"))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**base, **env}, timeout=120)


_START = """
import json, sys
from guardrail.agents.runner import import_litellm_if_called, load_prices
from guardrail.config.settings import load_settings
settings = load_settings()
import_litellm_if_called(settings)
load_prices(settings.judge)
from guardrail.providers.litellm import price_tokens
print(json.dumps({"imported": "litellm" in sys.modules,
                  "price": price_tokens(settings.judge.model, 1000, 100)}))
"""


@pytest.mark.parametrize("model, api_base, imported", [
    ("openai/gpt-4o-mini", "http://127.0.0.1:9/v1", False),   # posted to directly
    ("openai/test-judge", "http://127.0.0.1:9/v1", False),    # unknown: no price, no import
    ("openai/gpt-4o-mini", None, True),                       # a hosted API goes via litellm
])
def test_a_worker_imports_litellm_only_for_a_judge_sent_through_it(model, api_base, imported):
    env = {"GUARDRAIL_JUDGE_MODEL": model}
    if api_base:
        env["GUARDRAIL_JUDGE_API_BASE"] = api_base
    done = _python(_START, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["imported"] is imported
    if model == "openai/test-judge":
        assert figures["price"] is None
    else:
        entry = _bundled()["gpt-4o-mini"]
        expected = 1000 * entry["input_cost_per_token"] + 100 * entry["output_cost_per_token"]
        assert figures["price"] == pytest.approx(expected)


def test_a_fetched_price_map_is_litellms_to_read(tmp_path):
    """Told to fetch its map, litellm prices from what it fetched: guardrail
    does not answer from the bundled copy then."""
    code = ("from guardrail.providers.price_map import price_entry; "
            "print(price_entry('openai/gpt-4o-mini') is None)")
    done = _python(code, LITELLM_LOCAL_MODEL_COST_MAP="False")
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_the_bundled_map_is_the_file_litellm_reads():
    path = os.path.join(os.path.dirname(litellm().__file__), _price_map.MAP_FILE)
    with open(path, "rb") as handle:
        assert orjson.loads(handle.read()) == _bundled()
