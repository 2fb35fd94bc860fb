"""Prompt tokens of OpenAI chat models counted with tiktoken, without litellm.

``guardrail estimate`` counts every prompt it would send. litellm's counter
needs litellm imported, about 4 s of CPU, most of an estimate's 7 s for a few
cases. For the judges whose count is plain (an OpenAI or Azure OpenAI chat
model of litellm's bundled price map that tiktoken names an encoding for),
the count is tiktoken's, from the encoding files litellm ships, with the
chat format's fixed tokens per message and per reply::

    count_openai_chat_tokens("openai/gpt-4o-mini", messages)  # 21, as litellm says
    count_openai_chat_tokens("ollama/llama3", messages)       # None: ask litellm

Anything else answers None and is for litellm to count
(:func:`guardrail.providers.litellm.count_message_tokens`). ``tests/providers/test_tokens.py``
checks the two agree on every model this module counts, for messages under
1,024 characters: litellm counts a longer text in 1,024-character pieces,
a token or so more per piece than the text has, where this count is exact.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from .price_map import litellm_package_dir, price_entry

__all__ = ["chat_encoding_name", "count_openai_chat_tokens"]

#: Tokens the chat format adds around each message, and to prime the reply.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_REPLY = 3
_PROVIDERS = ("openai", "azure")
#: Where tiktoken fetches an encoding from; its cache names the file after this URL.
_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def count_openai_chat_tokens(model: str, messages: list[dict[str, Any]]) -> int | None:
    """Input tokens of ``messages`` for ``model``, or None when litellm must count."""
    if any(set(m) - {"role", "content"} or not all(isinstance(v, str) for v in m.values())
           for m in messages):
        return None  # names, tool calls, images: litellm's rules
    name = chat_encoding_name(model)
    encoding = _encoding(name) if name is not None else None
    if encoding is None:
        return None
    return TOKENS_PER_REPLY + sum(
        TOKENS_PER_MESSAGE + sum(len(encoding.encode(value, disallowed_special=()))
                                 for value in message.values())
        for message in messages)


@functools.lru_cache(maxsize=64)
def chat_encoding_name(model: str) -> str | None:
    """tiktoken's encoding for an OpenAI or Azure OpenAI chat model of the
    bundled price map; None for any other model, or a fine-tune (litellm
    counts those by their base model, tiktoken by an older table)."""
    entry = price_entry(model)
    if not entry or entry.get("litellm_provider") not in _PROVIDERS or entry.get("mode") != "chat":
        return None
    provider, _, bare = model.partition("/")
    bare = bare if provider in _PROVIDERS else model
    if bare.startswith("ft:"):
        return None
    from tiktoken.model import encoding_name_for_model

    try:
        return encoding_name_for_model(bare)
    except KeyError:
        return None  # newer than tiktoken's table: litellm decides


@functools.cache
def _encoding(name: str) -> Any:
    """The encoding read from litellm's bundled copy, or None when it has no
    copy (tiktoken would fetch it over the network) or is told to use another."""
    if os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR"):
        return None
    package = litellm_package_dir()
    if package is None:
        return None
    bundled = package / "litellm_core_utils" / "tokenizers"
    cache_key = hashlib.sha1(_ENCODING_URL.format(name).encode()).hexdigest()
    if not (bundled / cache_key).is_file():
        return None
    # What importing litellm's counter does too: tiktoken reads its files from there.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    import tiktoken

    return tiktoken.get_encoding(name)
