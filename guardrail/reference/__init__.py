"""The reference pages of the documentation, generated from the code.

``docs/gen_pages.py`` writes them while ``mkdocs build`` runs, so the settings,
record schemas and metric names in the docs are the ones this code has::

    >>> from guardrail.reference import pages
    >>> sorted(pages())  # doctest: +NORMALIZE_WHITESPACE
    ['reference/architecture.md', 'reference/metrics.md', 'reference/records.md',
     'reference/settings.md']

It reads every record model, settings group and metric, so it sits at the top
beside the command line; nothing in the product imports it.
"""

from __future__ import annotations

from .architecture import architecture_page
from .metrics import metrics_page
from .records import records_page
from .settings import settings_page

__all__ = ["pages", "architecture_page", "metrics_page", "records_page", "settings_page"]


def pages() -> dict[str, str]:
    """Each generated page's path under ``docs/`` → its Markdown."""
    return {
        "reference/settings.md": settings_page(),
        "reference/records.md": records_page(),
        "reference/metrics.md": metrics_page(),
        "reference/architecture.md": architecture_page(),
    }
