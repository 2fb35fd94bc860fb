"""``python -m guardrail.cli …``: the CLI without relying on the console script
being on PATH (``guardrail demo`` starts its worker this way)."""

from . import main

if __name__ == "__main__":
    main()
