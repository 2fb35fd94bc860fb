"""The one place litellm is imported, so its offline switch is always set first.

Without ``LITELLM_LOCAL_MODEL_COST_MAP=True`` every start waits on a network
fetch of the price map; the bundled copy is what we price with. Likewise
``LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True`` for the table of Anthropic's beta features.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

from .price_map import linear_prices, price_entry
from .tokens import count_openai_chat_tokens

__all__ = ["litellm", "price_tokens", "count_message_tokens", "cached_input_price",
           "max_input_tokens"]


@functools.cache
def litellm() -> ModuleType:
    """Import litellm lazily (it takes seconds) with offline defaults."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # Anthropic requests otherwise fetch litellm's beta-header table from GitHub first.
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    import litellm as _litellm

    _litellm.telemetry = False
    _litellm.suppress_debug_info = True
    # litellm logs whole request dicts at debug level; keep it at WARNING so a
    # debug run of guardrail cannot print an API key through it.
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return _litellm


def price_tokens(
    model: str,
    input_tokens: int,
    output_tokens: int,
    *,
    cached_tokens: int = 0,
    input_cost_per_token: float | None = None,
    output_cost_per_token: float | None = None,
) -> float | None:
    """USD for a token count, from explicit prices or litellm's bundled cost map.

    ``cached_tokens`` (part of ``input_tokens``, read from the provider's
    prompt cache) are priced at the map's ``cache_read_input_token_cost`` when
    it has one, otherwise at the full input price (:func:`cached_input_price`
    says which). Explicit prices have no cached rate: full price.

    Returns ``None`` when the price is unknown, so callers can say so
    instead of printing $0.
    """
    if input_cost_per_token is not None and output_cost_per_token is not None:
        return input_tokens * input_cost_per_token + output_tokens * output_cost_per_token
    cached = max(0, min(cached_tokens, input_tokens))
    linear = _linear_prices(model)
    if linear is not None:
        if not linear:
            return None
        unit_in, unit_out, unit_cached = linear
        return (unit_in * (input_tokens - cached) + unit_cached * cached
                + unit_out * output_tokens)
    return _map_cost(model, input_tokens, output_tokens, cached)


def _map_cost(model: str, input_tokens: int, output_tokens: int,
              cached_tokens: int = 0) -> float | None:
    try:
        prompt_cost, completion_cost = litellm().cost_per_token(
            model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens,
            cache_read_input_tokens=cached_tokens)
    except Exception:  # litellm raises several types for "not in the map"
        return None
    return float(prompt_cost) + float(completion_cost)


@functools.lru_cache(maxsize=64)
def _linear_prices(model: str) -> tuple[float, float, float] | tuple[()] | None:
    """Per-token (input, output, cached input) prices when the cost map prices
    ``model`` linearly; ``()`` when it does not know the model; None when the
    price depends on the size (tiered models: ask the map per call).

    Asking litellm on every judge call cost ~12 % of a worker's CPU (an
    exception per call for unknown models), so the answer is kept per model.
    Plain entries of the bundled map are read without litellm (:mod:`._price_map`).
    """
    entry = price_entry(model)
    if entry is not None:
        if not entry:
            return ()
        linear = linear_prices(entry)
        if linear is not None:
            unit_in, unit_out, cached_in = linear
            return unit_in, unit_out, unit_in if cached_in is None else cached_in
    unit_in, unit_out = _map_cost(model, 1000, 0), _map_cost(model, 0, 1000)
    if unit_in is None or unit_out is None:
        return ()
    big_in, big_out = _map_cost(model, 400_000, 0), _map_cost(model, 0, 400_000)
    if big_in is None or big_out is None:
        return None
    if abs(big_in - 400 * unit_in) > 1e-12 or abs(big_out - 400 * unit_out) > 1e-12:
        return None
    cached = cached_input_price(model)
    return unit_in / 1000, unit_out / 1000, unit_in / 1000 if cached is None else cached


def _model_info(model: str) -> dict[str, object]:
    entry = price_entry(model)
    if entry is not None and (not entry or linear_prices(entry) is not None):
        return entry
    try:
        return dict(litellm().get_model_info(model))
    except Exception:  # not in the map
        return {}


@functools.lru_cache(maxsize=64)
def cached_input_price(model: str) -> float | None:
    """The cost map's price per prompt-cache-read token, None when it has none
    (cached tokens are then priced like any input token)."""
    value = _model_info(model).get("cache_read_input_token_cost")
    return float(value) if isinstance(value, (int, float)) else None


@functools.lru_cache(maxsize=64)
def max_input_tokens(model: str) -> int | None:
    """The judge model's context window for input, as litellm's map knows it."""
    value = _model_info(model).get("max_input_tokens")
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def count_message_tokens(model: str, messages: list[dict[str, str]]) -> int:
    """Prompt tokens: OpenAI chat models' counted exactly with tiktoken, without
    importing litellm (:mod:`._tokens`); other models' as litellm counts them."""
    tokens = count_openai_chat_tokens(model, messages)
    if tokens is not None:
        return tokens
    return int(litellm().token_counter(model=model, messages=messages))
