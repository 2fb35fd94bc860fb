"""The whole consumer group's window counts, read from the window table's changelog.

A worker's window table holds only the cells of the partitions it owns. The
table's changelog topic holds the newest value of every cell, whichever worker
wrote it (the counting agent has already skipped duplicates), so a plain
consumer outside the group, reading all its partitions from the beginning,
sees the group's whole picture::

    view = RatesView(settings)            # in the worker: follows until stopped
    await view.start()                    # returns at once; reading goes on in a task
    view.rows(metric="toxicity")          # the group's /rates rows, newest window first
    view.status()                         # {"caught_up": True, "malformed_records": 0, ...}
    await view.stop()

    cells = await read_rates(settings)    # ``guardrail rates``: once, to the end seen now
    cells.rows()

The reading itself (where it starts, when it has caught up, what happens when
the topic is missing) is :mod:`guardrail.kafka.changelog`'s.
"""

from __future__ import annotations

from typing import Any

from ..config.settings import Settings
from ..kafka.changelog import TopicFollower, read_topic
from .window_cells import WindowCells, changelog_topic, live_horizon_seconds

__all__ = ["RatesView", "read_rates"]


def _horizon(settings: Settings) -> float:
    return live_horizon_seconds(settings.windows.window_seconds,
                                settings.windows.window_expires_seconds)


def _cells(settings: Settings) -> WindowCells:
    return WindowCells(window_seconds=settings.windows.window_seconds,
                       expires_seconds=settings.windows.window_expires_seconds)


async def read_rates(settings: Settings, *, app_id: str | None = None,
                     timeout: float = 60.0) -> WindowCells:
    """Read the changelog of ``app_id`` (default: the settings' app id) once, up
    to the end seen at the start; :class:`RatesUnavailable` if that fails."""
    app_id = app_id or settings.kafka.app_id
    cells = _cells(settings)
    missing = f"no worker with app id {app_id!r} has counted there yet (see --app-id)"
    await read_topic(settings.kafka, changelog_topic(app_id), cells, timeout=timeout,
                     fetch_wait_ms=settings.worker.consumer_fetch_wait_ms,
                     missing=missing, horizon_seconds=_horizon(settings))
    return cells


class RatesView(TopicFollower):
    """The window changelog followed for ``/rates`` (see :class:`TopicFollower`)."""

    name = "rates view"

    def __init__(self, settings: Settings, *, app_id: str | None = None) -> None:
        self.cells = _cells(settings)
        super().__init__(settings.kafka, changelog_topic(app_id or settings.kafka.app_id),
                         self.cells, fetch_wait_ms=settings.worker.consumer_fetch_wait_ms,
                         horizon_seconds=_horizon(settings))

    def rows(self, *, metric: str | None = None) -> list[dict[str, Any]]:
        """The group's unexpired window cells (of ``metric``, if given) as
        ``/rates`` rows — metric, group, window_start, window_end, total, unsafe,
        errors, unsafe_rate — newest window first."""
        return self.cells.rows(metric=metric)

    def status(self) -> dict[str, Any]:
        """How complete the rows are: caught up with the changelog yet, and how
        many of its records were not window cells (skipped)."""
        return {"changelog_topic": self.topic, "caught_up": self.caught_up,
                "malformed_records": self.cells.malformed}

    def after_poll(self) -> None:
        self.cells.prune()
