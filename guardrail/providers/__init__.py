"""Model providers, as guardrail meets them: the one place litellm is imported (its
offline switch set first), its bundled price map read without importing it, and
prompt tokens counted the way each provider bills them::

    from guardrail.providers import price_tokens, count_message_tokens
    cost = price_tokens("openai/gpt-4o-mini", input_tokens=734, output_tokens=40)
    tokens = count_message_tokens("openai/gpt-4o-mini", messages)

- :mod:`.litellm` — the litellm boundary: the module itself (imported on first use),
  prices and token counts through it.
- :mod:`.price_map` — litellm's bundled ``model_prices_and_context_window.json``,
  read directly: prices without the import's seconds.
- :mod:`.tokens` — OpenAI chat prompts counted with tiktoken from litellm's bundled
  encodings.

Bottom layer: it imports no other wing (the judges, the batch APIs and the budget
read prices and tokens from here, never the other way round).
"""

from __future__ import annotations

from .litellm import cached_input_price, count_message_tokens, max_input_tokens, price_tokens
from .price_map import linear_prices, price_entry

__all__ = ["price_tokens", "count_message_tokens", "cached_input_price", "max_input_tokens",
           "price_entry", "linear_prices"]
