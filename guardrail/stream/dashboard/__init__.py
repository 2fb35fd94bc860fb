"""The live dashboard, rendered on the server from plain rows: no Kafka, no
script, no CDN (the worker serves it at ``/dashboard``, see
:mod:`guardrail.agents.dashboard`)::

    from guardrail.stream.dashboard import PageContext, build_dashboard, render_page, spend_of

    data = build_dashboard(rows, alerts, window_seconds=300, version_label="model_version",
                           spend=spend_of(telemetry), rules=settings.windows.alert_rules)
    html = render_page(data, PageContext(app_id="guardrail", refresh_seconds=5))

- :mod:`.data` — ``/rates`` rows and alerts checked and shaped (series per
  group, versions side by side, coverage); bad rows become problems;
- :mod:`.spend` — this worker's spend and verdicts, from its telemetry;
- :mod:`.gate` — gate mode's panel: where this worker placed its records;
- :mod:`.charts` — the SVG charts (unsafe rate with alert marks, coverage);
- :mod:`.page` — the HTML document; :mod:`.style` — its stylesheet.
"""

from .data import Dashboard, build_dashboard
from .page import PageContext, render_page
from .spend import Spend, spend_of

__all__ = ["Dashboard", "PageContext", "Spend", "build_dashboard", "render_page", "spend_of"]
