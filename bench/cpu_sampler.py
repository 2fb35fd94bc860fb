"""CPU seconds of named processes, sampled in a thread from ``/proc`` (Linux).

    with CpuSampler({"judge": judge_pid}) as cpu:
        cpu.add("worker-1", worker.pid)          # processes may join later
        ...
        cpu.between(t0, t1)   # {"judge": 0.8, "worker-1": 3.1, "machine": 19.6}

Each process's user + system time (``/proc/PID/stat`` utime + stime, every
thread) is read every ``interval`` seconds with the wall time; ``between``
takes the samples nearest inside a span of epoch seconds and scales their
difference to the span. ``machine`` is the busy time of all cores together
(``/proc/stat``: everything but idle and iowait), so other jobs on the machine
show as the difference between it and the named processes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

__all__ = ["CpuSampler", "cpu_seconds", "machine_busy_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: The name ``between`` gives the whole machine's busy time.
MACHINE = "machine"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # fields from the 3rd (state) on
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime (14th), stime (15th)


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (not idle, not waiting on I/O)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


class CpuSampler:
    """A thread that samples the CPU time of named processes and of the machine."""

    def __init__(self, pids: dict[str, int] | None = None, interval: float = 0.5) -> None:
        self.pids = dict(pids or {})
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str, pid: int) -> None:
        with self._lock:
            self.pids[name] = pid
        self.sample()

    def sample(self) -> None:
        with self._lock:
            pids = dict(self.pids)
        now = {MACHINE: machine_busy_seconds()}
        for name, pid in pids.items():
            if (seconds := cpu_seconds(pid)) is not None:
                now[name] = seconds
        with self._lock:
            self.samples.append((time.time(), now))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds each process (and the machine) used from ``t0`` to ``t1``
        (epoch seconds), from the first sample at or after ``t0`` to the last at
        or before ``t1``, scaled to the span; processes missing from either of
        those samples are left out."""
        with self._lock:
            inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return {}
        (first_t, first), (last_t, last) = inside[0], inside[-1]
        scale = (t1 - t0) / (last_t - first_t)
        return {name: round((last[name] - first[name]) * scale, 3)
                for name in last if name in first}

    def __enter__(self) -> CpuSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
