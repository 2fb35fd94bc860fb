"""The worker's start: Faust's table changelogs are among the topics it creates
itself, before the app starts, with the configs Faust would give them."""

from guardrail.agents.app import build_app
from guardrail.agents.runner import table_changelogs
from guardrail.agents.windows import changelog_configs
from guardrail.agents.window_cells import changelog_topic, live_horizon_seconds
from guardrail.config.settings import load_settings


def test_every_table_changelog_is_planned_with_the_configs_faust_gives_it():
    settings = load_settings(environ={"GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
                                      "GUARDRAIL_APP_ID": "runner-check",
                                      "GUARDRAIL_TOPIC_PARTITIONS": "8"})
    app = build_app(settings).app
    planned = table_changelogs(app)
    assert set(planned) == {table.changelog_topic_name for table in app.tables.values()}
    windows = settings.windows
    horizon = live_horizon_seconds(windows.window_seconds, windows.window_expires_seconds)
    assert planned[changelog_topic("runner-check")] == (8, changelog_configs(horizon))
    assert planned["runner-check-sessions-changelog"] == (8, {"cleanup.policy": "compact"})
