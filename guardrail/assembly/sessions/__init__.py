"""Conversations judged as a whole: turns (and agent runs) that carry one
conversation id gathered into a session, judged while it goes on and when it
ends. Pure logic, no Kafka (the Faust wiring is in :mod:`guardrail.agents`)::

    from guardrail.assembly.sessions import Turn, session_case

    case = session_case(turns, session_id="conv-42", max_chars=settings.session_max_chars)
    metrics = await evaluator.evaluate(Case.model_validate(case))   # the session rubrics

- :mod:`.settings`: the ``sessions`` settings group.
- :mod:`.turns`: one turn as the assembler keeps it (:class:`Turn`).
- :mod:`.transcript`: the judged ``session`` text (``render_transcript``).
- :mod:`.case`: a session judgment's case dict (``session_case``).
- :mod:`.prefix`: how much of consecutive judgments' prompts a prompt cache reuses.
- :mod:`.book` and :mod:`.gathering`: a session's bookkeeping while its turns
  arrive, as one kind of whole for the generic assembler.

The names are imported on first use: :mod:`guardrail.config.settings` imports this
package's settings, which must not pull in the judging core. Nothing here imports
the stream or Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .case import session_case
    from .transcript import Transcript, render_transcript
    from .settings import SessionSettings
    from .turns import Turn

__all__ = ["Turn", "Transcript", "render_transcript", "session_case", "SessionSettings"]

_HOMES = {"Turn": ".turns", "Transcript": ".transcript", "render_transcript": ".transcript",
          "session_case": ".case", "SessionSettings": ".settings"}

__getattr__ = lazy_exports(__name__, _HOMES)
