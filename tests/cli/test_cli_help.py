"""The command line's help, over the whole click group as the generated reference
walks it: a whole first line per command, every default and choice shown, and
the worker's flags for its topics and web port."""

from __future__ import annotations

import asyncio
import logging
import os

import bcrypt
import click
import pytest
from click.testing import CliRunner

import guardrail.cli as cli_package
from guardrail.cli import cli
from guardrail.cli.options import setting_default
from guardrail.cli.stream import LOG_LEVELS
from guardrail.config.settings import ENV_PREFIX, load_settings

#: The width click shortens a first help line to when it makes one itself.
CLICK_SHORT_HELP_LIMIT = 45


def _commands(group: click.Group, path: str = "guardrail"):
    """Every command and subcommand, depth first, the root group included."""
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def _options():
    for path, command in _commands(cli):
        ctx = click.Context(command, info_name=path)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                yield path, param, " ".join(param.get_help_record(ctx) or ())


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


@pytest.mark.parametrize("path, command", list(_commands(cli)), ids=lambda v: str(v))
def test_every_command_has_a_whole_one_line_summary(path, command):
    # What `guardrail --help` lists, and what the reference (mkdocs-click) lists:
    # the short help, else the first line of the help.
    listed = command.get_short_help_str(CLICK_SHORT_HELP_LIMIT)
    reference = (command.short_help or command.help or "").splitlines()[:1]
    for summary in (listed, *reference):
        assert summary.strip(), f"{path} has no summary"
        assert not summary.endswith(("...", "…")), f"{path}: cut summary {summary!r}"
        assert _balanced(summary), f"{path}: unbalanced parentheses in {summary!r}"
    assert reference == [listed], f"{path}: --help and the reference disagree"


def test_the_top_level_help_lists_whole_summaries_and_says_why_nexagauge():
    result = CliRunner().invoke(cli, ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    listing = result.output.split("Commands:")[1].splitlines()
    assert listing and not [line for line in listing if line.rstrip().endswith("...")]
    text = " ".join(result.output.split())
    assert "nexagauge" in text and "nexagauge run redteam" in text and "spec" in text
    assert "nexagauge run redteam" in " ".join((cli_package.__doc__ or "").split())


@pytest.mark.parametrize("path, param, shown", [
    case for case in _options() if case[1].to_info_dict()["default"] not in (None, ())
    and not case[1].is_flag], ids=lambda v: v if isinstance(v, str) else None)
def test_every_default_is_shown(path, param, shown):
    default = param.to_info_dict()["default"]
    assert f"[default: {default}" in shown, f"{path} {param.opts[0]} hides its default"


@pytest.mark.parametrize("path, param, shown", [
    case for case in _options() if isinstance(case[1].type, click.Choice)],
    ids=lambda v: v if isinstance(v, str) else None)
def test_every_choice_is_listed(path, param, shown):
    missing = [str(choice) for choice in param.type.choices if str(choice) not in shown]
    assert not missing, f"{path} {param.opts[0]} does not list {missing}"


def _worker_option(flag: str) -> str:
    return next(shown for path, param, shown in _options()
                if path == "guardrail worker" and flag in param.opts)


def _served_pages(tmp_path) -> set[str]:
    """The top-level paths a worker with every page on (review included) serves."""
    from guardrail.agents import build_app

    users = tmp_path / "users"
    users.write_text(f"ana:{bcrypt.hashpw(b'pw', bcrypt.gensalt(rounds=4)).decode()}\n")
    runtime = build_app(load_settings(environ={}, judge_model="openai/test-judge",
                                      judge_api_key="k", review_users_file=str(users)))
    try:
        return {"/" + route.resource.canonical.strip("/").split("/")[0]
                for route in runtime.app.web.web_app.router.routes()}
    finally:
        asyncio.run(runtime.message_judge.evaluator.aclose())


def test_the_worker_help_names_every_page_and_each_setting_default(tmp_path):
    pages = _served_pages(tmp_path)
    assert {"/health", "/metrics", "/rates", "/dashboard", "/review", "/agreement"} <= pages
    web_port = _worker_option("--web-port")
    assert [page for page in sorted(pages) if page not in web_port] == []
    for flag, setting in (("--web-port", "web_port"), ("--input-topic", "input_topic"),
                          ("--results-topic", "results_topic")):
        assert f"[default: {setting_default(setting)}" in _worker_option(flag)


def test_the_worker_loglevels_are_names_logging_and_faust_accept():
    from mode.utils.logging import level_number

    assert "info" in LOG_LEVELS
    for level in LOG_LEVELS:
        assert isinstance(logging.getLevelName(level.upper()), int), level
        assert isinstance(level_number(level), int), level
    refused = CliRunner().invoke(cli, ["worker", "--loglevel", "loud"])
    assert refused.exit_code == 2 and "loud" in refused.output


@pytest.fixture
def worker_settings(monkeypatch):
    """Run ``guardrail worker`` up to the point it has its settings; return them."""
    import guardrail.agents

    built = []
    monkeypatch.setattr(guardrail.agents, "build_app", lambda settings: built.append(settings))
    monkeypatch.setattr(guardrail.agents, "run_worker", lambda runtime, loglevel: None)

    def run(*args: str, env: dict[str, str]) -> object:
        result = CliRunner().invoke(cli, ["worker", *args], env=env)
        assert result.exit_code == 0, result.output
        return built.pop()

    return run


def test_worker_flags_override_the_config_file_and_the_environment(worker_settings, tmp_path,
                                                                   monkeypatch):
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    env = {"GUARDRAIL_INPUT_TOPIC": "env-in", "GUARDRAIL_RESULTS_TOPIC": "env-out",
           "GUARDRAIL_WEB_PORT": "7001"}
    assert worker_settings(env=env).kafka.input_topic == "env-in"  # no flag: the env's
    config = tmp_path / "g.yaml"
    config.write_text("input_topic: config-in\nresults_topic: config-out\nweb_port: 7002\n")
    from_config = worker_settings("--config", str(config), env=env)
    assert (from_config.kafka.input_topic, from_config.kafka.results_topic,
            from_config.worker.web_port) == ("config-in", "config-out", 7002)
    flagged = worker_settings("--config", str(config), "--input-topic", "flag-in",
                              "--results-topic", "flag-out", "--web-port", "7003", env=env)
    assert (flagged.kafka.input_topic, flagged.kafka.results_topic,
            flagged.worker.web_port) == ("flag-in", "flag-out", 7003)
    # A flag given with its default value is still a flag: it beats the config file.
    defaulted = worker_settings("--config", str(config), "--web-port",
                                str(setting_default("web_port")), env=env)
    assert defaulted.worker.web_port == setting_default("web_port")
