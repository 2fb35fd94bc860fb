"""litellm's bundled price map, read directly: prices without importing litellm.

Importing litellm costs seconds of CPU (7 s of a worker's first seconds on two
busy cores, with the event loop starved even when the import runs in a thread:
judge calls in flight then time out and are sent again). A worker whose judge
is posted to directly needs litellm only for prices, and the price map is a
JSON file litellm ships and reads itself when offline
(``LITELLM_LOCAL_MODEL_COST_MAP=True``, which guardrail sets)::

    entry = price_entry("openai/gpt-4o-mini")  # {"input_cost_per_token": 1.5e-07, ...}
    linear_prices(entry)                       # (1.5e-07, 6e-07, 7.5e-08)

Only plain entries are answered here: a model found under its own name (or,
with a provider prefix, under the bare name of that provider's entry) with a
per-token input and output price and nothing that makes the price depend on
more than the token counts (tiers above a context size, cache-hit rates).
Anything else, and any map litellm would fetch instead of its bundled copy,
is for litellm to answer (:mod:`guardrail.providers.litellm` falls back to it).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

import orjson

__all__ = ["price_entry", "linear_prices", "litellm_package_dir", "MAP_FILE"]

#: The file litellm reads its prices from when it does not fetch them.
MAP_FILE = "model_prices_and_context_window_backup.json"

#: Cost keys whose presence means the price is not linear in the two token counts.
_NON_LINEAR_MARKERS = ("_above_", "_cache_hit", "dbu_", "_per_second", "_per_character")


def litellm_package_dir() -> Path | None:
    """litellm's package folder, found without running its import; None if absent."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0])


@functools.cache
def _bundled_map() -> dict[str, Any] | None:
    """The bundled map, or None when litellm would not use it (told to fetch
    its map, or not installed, or the file is unreadable)."""
    if os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True").lower() != "true":
        return None
    package = litellm_package_dir()
    if package is None:
        return None
    try:
        data = orjson.loads((package / MAP_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def price_entry(model: str) -> dict[str, Any] | None:
    """The map's entry for ``model`` (exact name, else the bare name under the
    same provider); ``{}`` when the map is readable and has none; None when
    only litellm can say."""
    prices = _bundled_map()
    if prices is None:
        return None
    entry = prices.get(model)
    if isinstance(entry, dict) and model != "sample_spec":
        return entry
    provider, _, bare = model.partition("/")
    entry = prices.get(bare) if bare else None
    if isinstance(entry, dict) and entry.get("litellm_provider") == provider:
        return entry
    return {}


def linear_prices(entry: dict[str, Any]) -> tuple[float, float, float | None] | None:
    """(input, output, cached input or None) per token for a plain entry;
    None when the entry's price is not just linear in the token counts."""
    unit_in, unit_out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not (_is_price(unit_in) and _is_price(unit_out)):
        return None
    if any(marker in key for key in entry if "cost" in key for marker in _NON_LINEAR_MARKERS):
        return None
    cached = entry.get("cache_read_input_token_cost")
    return float(unit_in), float(unit_out), float(cached) if _is_price(cached) else None


def _is_price(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
