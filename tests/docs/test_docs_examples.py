"""The docs cannot rot: every command block of the README and the docs either
runs here, in order, and succeeds, or says why it cannot (see support.doc_blocks)."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.doc_blocks import ROOT, PageRun, command_blocks, doc_pages, run_page

BLOCKS = {str(page.relative_to(ROOT)): command_blocks(page) for page in doc_pages()}
RUNNABLE = {page: blocks for page, blocks in BLOCKS.items()
            if any(b.skip_reason is None for b in blocks)}
#: Pages run side by side: most of a page's time is spent waiting (a worker
#: joining its group, a tail waiting for results), so three at once beside the
#: suite's other test processes on 2 cores (two took about 300 s in all).
PAGES_AT_ONCE = 3
#: Programs some pages call that the system, not the venv, provides (.ci/run
#: installs them from Debian when it can); a page that needs a missing one skips.
SYSTEM_TOOLS = ("curl", "htpasswd", "promtool")
#: Pages that clean up after themselves, with the one folder they write into:
#: the first page a user runs must stop everything it starts and leave nothing
#: in the directory it was started from but that folder. (The how-to guides
#: build on a broker and judge left running, so the runner stops theirs.)
TIDY_PAGES = {"docs/getting-started.md": "guardrail-start"}


def _missing_tools(page: str) -> list[str]:
    code = "\n".join(b.code for b in RUNNABLE[page] if b.skip_reason is None)
    return [tool for tool in SYSTEM_TOOLS
            if re.search(rf"\b{tool}\b", code) and not shutil.which(tool)]


def test_every_skipped_block_says_why():
    for blocks in BLOCKS.values():
        for block in blocks:
            assert block.skip_reason is None or len(block.skip_reason) >= 8, \
                f"{block.page}:{block.line}: say why the block cannot run here"

def test_no_block_pipes_into_a_reader_that_stops_early():
    # Pages run under `set -o pipefail`, as a careful user's scripts do: `grep -q`
    # exits at its first match, the writer before it (curl) then dies of SIGPIPE,
    # and the pipeline fails, so an `until ... | grep -q` loop spins on, for as long
    # as the scheduler lets curl lose that race (once past the page's 180 s in CI).
    early = re.compile(r"\|\s*(?:grep\s+(?:-\w*q|--quiet)|head\b)")
    for blocks in BLOCKS.values():
        for block in blocks:
            if block.skip_reason is None and (found := early.search(block.code)):
                pytest.fail(f"{block.page}:{block.line}: '{found.group(0)}' stops reading "
                            "early; redirect a full read to /dev/null instead")



def test_getting_started_and_the_readme_have_blocks_that_run():
    assert {"README.md", "docs/getting-started.md"} <= set(RUNNABLE)


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory) -> dict[str, PageRun]:
    """Every selected page's run (``-k getting`` runs that page alone)."""
    selected = [item.callspec.params["page"] for item in request.session.items
                if hasattr(item, "callspec") and "page" in item.callspec.params
                and not _missing_tools(item.callspec.params["page"])]

    # The folders are made here, before the threads: pytest creates its base folder
    # lazily, and two threads asking first both try to make it (FileExistsError).
    workdirs = [tmp_path_factory.mktemp("page") / "work" for _ in selected]

    def run(page: str, workdir: Path) -> PageRun:
        workdir.mkdir()
        return run_page(RUNNABLE[page], workdir)

    with ThreadPoolExecutor(PAGES_AT_ONCE) as pool:
        return dict(zip(selected, pool.map(run, selected, workdirs)))


@pytest.mark.kafka
# The first page's setup runs every page (PAGES_AT_ONCE at a time): 3 to 4 minutes
# in the suite on 2 cores, past the suite's 300 s default meant for one test.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_the_command_blocks_of_a_page_run(page, page_runs):
    if missing := _missing_tools(page):
        pytest.skip(f"{page} calls {', '.join(missing)}, not installed here")
    run = page_runs[page]
    print(f"{page}: {run.seconds:.1f} s")
    assert run.returncode == 0, f"{page} failed (exit {run.returncode}):\n{run.output[-4000:]}"
    if page in TIDY_PAGES:
        assert run.left_running == (), f"{page} left running:\n" + "\n".join(run.left_running)
        written = sorted(path.name for path in run.workdir.iterdir())
        assert written == [TIDY_PAGES[page]], f"{page} wrote outside its folder: {written}"


def _python_blocks(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [block.split("\n", 1)[1] for block in text.split("```")[1::2]
            if block.startswith("python\n")]


@pytest.mark.kafka
def test_the_python_api_example_judges_a_case(tmp_path):
    """The embedding example of the Python API page, run as written against the
    stand-in judge: it prints the contract's JSON for its case."""
    import json
    import os
    import subprocess
    import sys

    from support.doc_blocks import _stop_group, _wait_for_port, free_port

    (example,) = _python_blocks(ROOT / "docs" / "reference" / "api.md")
    port = free_port()
    judge = subprocess.Popen([sys.executable, "-m", "guardrail.local.rule_judge", "--port",
                              str(port)], start_new_session=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update(GUARDRAIL_JUDGE_API_BASE=f"http://127.0.0.1:{port}/v1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    try:
        _wait_for_port(port)
        example = example.replace('judge_model="openai/gpt-4o-mini"',
                                  'judge_model="openai/test-judge"')
        run = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        _stop_group(judge)
        judge.wait()
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout)
    assert set(record) == {"metrics", "cost"}  # the contract's shape, as the page says
    assert {m["name"]: m["result"][0]["verdict"] for m in record["metrics"]} == {
        "bias": "SAFE", "toxicity": "SAFE"}
