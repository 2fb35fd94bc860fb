"""The documentation site builds offline with no warning and prints nothing but
its progress, and its generated reference lists every command, option, setting
and metric this code has."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from guardrail.cli import cli
from guardrail.config.settings import ENV_PREFIX, FLAT_NAMES
from guardrail.stream.telemetry import Telemetry
from support.paths import ROOT

pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")


#: The switches of two third-party notices: mkdocs.yml sets them itself, so the
#: build runs without them, as a user's shell runs it.
NOTICE_SWITCHES = ("DISABLE_MKDOCS_2_WARNING", "NO_MKDOCS_2_WARNING")
#: What mkdocs itself prints on a clean build; anything else (a third-party
#: banner, a plugin's INFO line) is something a user would have to wonder about.
BUILD_PROGRESS = re.compile(r"INFO\s+-\s+(Cleaning site directory|Building documentation "
                            r"to directory: .+|Documentation built in [\d.]+ seconds)")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> tuple[Path, str]:
    """The site built by ``mkdocs build --strict``, and everything the build printed."""
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if k not in NOTICE_SWITCHES}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-4000:]}"
    return out, built.stdout + built.stderr


@pytest.fixture(scope="module")
def site(build) -> Path:
    return build[0]


def test_a_strict_build_prints_its_progress_and_nothing_else(build):
    _, printed = build
    noise = [line for line in printed.splitlines()
             if line.strip() and not BUILD_PROGRESS.fullmatch(line.strip())]
    assert noise == [], "the build printed more than its progress:\n" + "\n".join(noise)


def test_the_docs_extra_brings_a_formatter_for_the_api_signatures():
    # mkdocstrings-python formats long signatures with Black or Ruff and, with
    # neither installed (a fresh `pip install -e '.[docs]'`), says so on every build.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    docs = extras["project"]["optional-dependencies"]["docs"]
    assert [r for r in docs if re.match(r"(ruff|black)\b", r)], docs


def _text(page: Path) -> str:
    """The page's visible text, with tags and scripts removed."""
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", raw)))


def _commands(group: click.Group, path: str = "guardrail"):
    for name, command in group.commands.items():
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")


def test_the_cli_reference_lists_every_command_and_option(site):
    text = _text(site / "reference" / "cli.html")
    for path, command in _commands(cli):
        assert path in text, f"{path} is missing from the CLI reference"
        for param in command.params:
            for flag in getattr(param, "opts", []):
                if flag.startswith("-"):
                    assert flag in text, f"{path} {flag} is missing from the CLI reference"


def test_the_settings_reference_lists_every_setting_with_its_environment_variable(site):
    text = _text(site / "reference" / "settings.html")
    for name in FLAT_NAMES:
        assert re.search(rf"\b{name}\b", text), f"setting {name} is missing"
        assert ENV_PREFIX + name.upper() in text, f"{ENV_PREFIX}{name.upper()} is missing"


def test_the_metrics_reference_lists_every_series_of_a_worker(site):
    text = _text(site / "reference" / "metrics.html")
    for family in Telemetry().registry.collect():
        assert family.name in text, f"metric {family.name} is missing"


def test_the_site_loads_nothing_from_the_network(site):
    for page in site.rglob("*.html"):
        source = page.read_text(encoding="utf-8")
        remote = re.findall(r"""<(?:script|link|img)\b[^>]*(?:src|href)=["'](https?://[^"']+)""",
                            source)
        assert not remote, f"{page.relative_to(site)} loads {remote[:3]}"


def test_every_page_of_the_docs_folder_is_in_the_navigation(site):
    built = {p.relative_to(site).with_suffix(".md").as_posix() for p in site.rglob("*.html")}
    sources = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert sources <= built
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    assert sources <= set(re.findall(r"[\w/-]+\.md", nav)), "a page is not in the nav"


def test_the_built_site_opens_from_disk_in_a_browser(site, browser):
    """Opened as files (no server), offline: the home page links into every section and the
    settings reference shows its tables; ``GUARDRAIL_SITE_SCREENSHOTS=docs/img``
    also saves both (how docs/img/site-home.png and site-settings.png are made)."""
    shots = os.environ.get("GUARDRAIL_SITE_SCREENSHOTS")
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((site / "index.html").as_uri())
    assert page.title().startswith("guardrail")
    links = page.eval_on_selector_all("article a", "els => els.map(e => e.getAttribute('href'))")
    for target in ("getting-started.html", "how-to/otel-inputs.html", "reference/index.html",
                   "operations.html", "judge-quality.html"):
        assert target in links, f"the home page does not link {target}"
    assert page.eval_on_selector("article img", "img => img.naturalWidth") > 0  # the diagram
    if shots:
        page.screenshot(path=str(Path(shots) / "site-home.png"))
    page.goto((site / "reference" / "settings.html").as_uri())
    assert page.locator("article table").count() >= 9  # one per settings group
    assert page.get_by_text("GUARDRAIL_JUDGE_MODEL").count() >= 1
    if shots:  # at the judge group's table
        page.goto((site / "reference" / "settings.html").as_uri() + "#judge")
        page.screenshot(path=str(Path(shots) / "site-settings.png"))
    _assert_no_sideways_scrolling(page, site / "how-to" / "otel-inputs.html")
    # Search is the one part that needs the site served (a web worker cannot
    # load from file://; `python -m http.server -d site`): anything else failing is a bug.
    assert not [e for e in errors if "search_index" not in e], errors


#: The widest line of a code block over the width it has, in the browser's font.
_FILL = """code => {
  const text = document.createRange();
  text.selectNodeContents(code);
  const style = getComputedStyle(code);
  const room = code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return text.getBoundingClientRect().width / room;
}"""


def _assert_no_sideways_scrolling(page, html: Path) -> None:
    """At 1,400 px the page does not scroll sideways and its text diagrams fit
    their box with a tenth to spare: another machine's monospace font, or the
    fallback font of the arrows, may be that much wider than this one's."""
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(html.as_uri())
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= viewport, f"{html.name} scrolls sideways: {width} px in {viewport} px"
    diagrams = page.locator("article pre > code", has_text="──")
    assert diagrams.count() >= 1
    for index in range(diagrams.count()):
        fill = diagrams.nth(index).evaluate(_FILL)
        assert fill <= 0.9, f"diagram {index + 1} of {html.name} fills {fill:.0%} of its box"
