"""The command blocks of the docs, and a runner that executes one page's blocks.

Every ```` ```bash ```` block in the README and under ``docs/`` is a command block.
A block is run unless the line right above its fence says why not::

    <!-- docs-test: skip: needs a SASL_SSL cluster -->

A page's runnable blocks run in order as one bash script (``set -euo
pipefail``) in an empty directory, with the setup Getting started ends with:
a broker and the stand-in rule judge, in ``GUARDRAIL_BOOTSTRAP_SERVERS``,
``GUARDRAIL_JUDGE_MODEL`` and ``GUARDRAIL_JUDGE_API_BASE``. The ports written
in the docs (9092 broker, 8089 judge, 6066/6067 worker pages) are replaced by
free ones, and everything the page left running is stopped at its end, after
it is listed (:attr:`PageRun.left_running`: what a page that cleans up after
itself must not leave).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from guardrail._processes import free_port, guardrail_argv, port_open

from .paths import ROOT
DOC_PORTS = (9092, 8089, 6066, 6067)
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip:\s*(?P<reason>.*?)\s*-->")
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    skip_reason: str | None


def command_blocks(path: Path) -> list[Block]:
    """The ```bash blocks of one Markdown file, with the skip reason above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        if fence["lang"] == "bash":
            above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = _SKIP.search(above)
            indent = len(fence["indent"])
            code = "\n".join(line[indent:] for line in lines[i + 1:end])
            blocks.append(Block(str(path.relative_to(ROOT)), i + 1, code,
                                skip["reason"] if skip else None))
        i = end + 1
    return blocks


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on port {port}")
        time.sleep(0.1)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to everything the page started (its process group), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader: a zombie still counts as a member
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@dataclass(frozen=True)
class PageRun:
    returncode: int
    output: str
    seconds: float
    #: The empty directory the page ran in.
    workdir: Path
    #: ``pid: command line`` of what the page started and left running when its
    #: last block ended (the runner stops it then).
    left_running: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Process:
    pid: int
    session: int
    zombie: bool
    command: str
    cwd: str


def _processes() -> list[_Process]:
    """Every process /proc shows, with what tells whose it is (none where
    there is no /proc: the check is Linux's, as .ci/run's machine is)."""
    found: list[_Process] = []
    if not Path("/proc").is_dir():
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # Fields after the command name, which is in parentheses and may hold spaces.
        state, _ppid, _group, session = stat.rsplit(")", 1)[1].split()[:4]
        found.append(_Process(int(entry.name), int(session), state == "Z", command, cwd))
    return found


def _left_running(session: int, page_dir: Path, ports: Collection[int],
                  runner_sessions: Collection[int]) -> tuple[str, ...]:
    """What the page started that still runs: a process of its session, or one
    whose command line names the page's directory or ports or that works in
    that directory (which covers what the page started in a session of its
    own); the runner's own broker and judge aside."""
    mentions = re.compile(rf"{re.escape(str(page_dir))}|\b(?:{'|'.join(map(str, ports))})\b")
    left = []
    for process in _processes():
        if process.zombie or process.pid == os.getpid() or process.session in runner_sessions:
            continue
        if (process.session == session or mentions.search(process.command)
                or process.cwd == str(page_dir) or process.cwd.startswith(f"{page_dir}/")):
            left.append(f"{process.pid}: {process.command}")
    return tuple(left)


def run_page(blocks: list[Block], workdir: Path, *, timeout: float = 180.0) -> PageRun:
    """Run the runnable blocks as one script; services the page starts itself
    (a broker, the rule judge) are not started for it."""
    ports = {port: free_port() for port in DOC_PORTS}
    code = "\n".join(b.code for b in blocks if b.skip_reason is None)
    for doc_port, port in ports.items():
        code = re.sub(rf"\b{doc_port}\b", str(port), code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               GUARDRAIL_BOOTSTRAP_SERVERS=f"127.0.0.1:{ports[9092]}",
               GUARDRAIL_JUDGE_MODEL="openai/test-judge",
               GUARDRAIL_JUDGE_API_BASE=f"http://127.0.0.1:{ports[8089]}/v1",
               HOME=str(workdir.parent / "home"),  # caches (replay's judgments) stay with the page
               LITELLM_LOCAL_MODEL_COST_MAP="True", DISABLE_MKDOCS_2_WARNING="true",
               NO_MKDOCS_2_WARNING="1")
    services = []
    if "guardrail broker" not in code:
        services.append((guardrail_argv("broker", "--port", str(ports[9092])), ports[9092]))
    if "guardrail.local.rule_judge" not in code:
        services.append(([sys.executable, "-m", "guardrail.local.rule_judge", "--port",
                          str(ports[8089])], ports[8089]))
    started = [subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for cmd, _ in services]
    try:
        for _, port in services:
            _wait_for_port(port)
        return _run_script(code, workdir, env, timeout,
                           lambda session: _left_running(session, workdir.parent, ports.values(),
                                                         {proc.pid for proc in started}))
    finally:
        for proc in started:
            _stop_group(proc)
            proc.wait()


def _run_script(code: str, workdir: Path, env: dict[str, str], timeout: float,
                left_running: Callable[[int], tuple[str, ...]]) -> PageRun:
    """bash waits for the foreground commands only: the output goes to a file,
    not a pipe, since the page's background jobs keep a pipe open. What still
    runs when the script has ended is listed before it is stopped."""
    script = "set -euo pipefail\n" + code + "\n"
    log = workdir.parent / f"{workdir.name}.output"
    began = time.monotonic()
    left: tuple[str, ...] = ()
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-c", script], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout)
            left = left_running(proc.pid)  # the session's id is its leader's pid
        except subprocess.TimeoutExpired:
            returncode = -1
        finally:
            seconds = time.monotonic() - began
            _stop_group(proc)
            proc.wait()
    output = log.read_text(errors="replace")
    if returncode == -1:
        output += f"\n[docs-test] the page did not finish within {timeout:.0f} s"
    return PageRun(returncode, output, seconds, workdir, left)
