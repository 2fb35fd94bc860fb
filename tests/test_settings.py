import pytest

from guardrail.errors import ConfigError
from guardrail.settings import load_settings


def test_precedence_flags_over_config_over_env(tmp_path):
    config = tmp_path / "g.yaml"
    config.write_text("judge_model: openai/from-config\njudge_timeout: 7\n")
    env = {"GUARDRAIL_JUDGE_MODEL": "openai/from-env", "GUARDRAIL_JUDGE_TIMEOUT": "3",
           "GUARDRAIL_JUDGE_CONCURRENCY": "4", "GUARDRAIL_GROUP_LABELS": "model, app"}
    settings = load_settings(config, environ=env, judge_model="openai/from-flag")
    assert settings.judge_model == "openai/from-flag"
    assert settings.judge_timeout == 7
    assert settings.judge_concurrency == 4
    assert settings.group_labels == ("model", "app")
    assert load_settings(config, environ=env).judge_model == "openai/from-config"
    assert load_settings(environ=env).judge_model == "openai/from-env"


def test_config_file_from_env_and_redteam_block(tmp_path):
    config = tmp_path / "g.json"
    config.write_text('{"redteam": {"scoring_mode": "scale_1_5", "metrics": '
                      '[{"name": "pii", "goal": "no personal data"}]}}')
    settings = load_settings(environ={"GUARDRAIL_CONFIG": str(config)})
    assert settings.redteam.scoring_mode == "scale_1_5"
    assert settings.redteam.metrics[0].name == "pii"


def test_secrets_are_masked_everywhere_they_could_be_printed():
    settings = load_settings(environ={"GUARDRAIL_JUDGE_API_KEY": "sk-very-secret"})
    assert "sk-very-secret" not in repr(settings)
    assert "sk-very-secret" not in str(settings.public_dict())
    assert settings.judge_api_key.get_secret_value() == "sk-very-secret"


def test_invalid_values_name_the_setting_without_echoing_them():
    with pytest.raises(ConfigError, match="judge_timeout") as info:
        load_settings(environ={"GUARDRAIL_JUDGE_TIMEOUT": "soon"})
    assert "soon" not in str(info.value)
    with pytest.raises(ConfigError, match="unknown_setting"):
        load_settings(environ={}, unknown_setting=1)


def test_bad_config_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(bad, environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml", environ={})
