"""Deterministic draws: the same id falls on the same side of a rate in every
process and release, so a redelivered or replayed message is chosen as before::

    is_sampled("case-17", 0.1)                  # judge it? (stream sampling)
    is_sampled("review|case-17|toxicity", 0.01) # review it? (guardrail.review)
"""

from __future__ import annotations

import hashlib

__all__ = ["sample_point", "is_sampled"]

# Keyed, so the sample is independent of any other hash of the same ids.
_PERSON = b"grsample"


def sample_point(sample_id: str) -> float:
    """Where an id falls in [0, 1): the same in every process and release."""
    digest = hashlib.blake2b(sample_id.encode("utf-8", "surrogatepass"), digest_size=8,
                             person=_PERSON).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def is_sampled(sample_id: str, rate: float) -> bool:
    """Judge the message named ``sample_id`` at ``rate``? Rate 1 always, 0 never."""
    return rate >= 1.0 or sample_point(sample_id) < rate
