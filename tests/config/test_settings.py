import orjson
import pytest

from guardrail.errors import ConfigError
from guardrail.config.settings import FLAT_NAMES, Settings, load_settings, settings_env

#: Every setting's name as users wrote it before settings were grouped: as
#: config keys, ``GUARDRAIL_<NAME>`` variables and flags these must keep
#: working, each landing in its group.
OLD_NAMES = {
    "judge_model": ("judge", "model"), "judge_api_base": ("judge", "api_base"),
    "judge_api_key": ("judge", "api_key"), "judge_timeout": ("judge", "timeout"),
    "judge_max_retries": ("judge", "max_retries"),
    "judge_concurrency": ("judge", "concurrency"),
    "judge_max_tokens": ("judge", "max_tokens"),
    "judge_temperature": ("judge", "temperature"),
    "judge_structured_output": ("judge", "structured_output"),
    "judge_logprobs": ("judge", "logprobs"),
    "judge_transport": ("judge", "transport"),
    "judge_input_cost_per_token": ("judge", "input_cost_per_token"),
    "judge_output_cost_per_token": ("judge", "output_cost_per_token"),
    "rubric_dir": ("evaluation", "rubric_dir"), "redteam": ("evaluation", "redteam"),
    "cache_path": ("evaluation", "cache_path"),
    "judge_calls": ("evaluation", "judge_calls"),  # added since, by the same rules
    "verdict_thresholds": ("evaluation", "verdict_thresholds"),
    "bootstrap_servers": ("kafka", "bootstrap_servers"), "input_topic": ("kafka", "input_topic"),
    "bootstrap_timeout": ("kafka", "bootstrap_timeout"),
    "results_topic": ("kafka", "results_topic"), "dlq_topic": ("kafka", "dlq_topic"),
    "alerts_topic": ("kafka", "alerts_topic"), "judgments_topic": ("kafka", "judgments_topic"),
    "topic_partitions": ("kafka", "topic_partitions"),
    "topic_replication": ("kafka", "topic_replication"), "app_id": ("kafka", "app_id"),
    "producer_idempotence": ("kafka", "producer_idempotence"),
    "security_protocol": ("kafka", "security_protocol"),
    "sasl_mechanism": ("kafka", "sasl_mechanism"), "sasl_username": ("kafka", "sasl_username"),
    "sasl_password": ("kafka", "sasl_password"), "ssl_cafile": ("kafka", "ssl_cafile"),
    "ssl_certfile": ("kafka", "ssl_certfile"), "ssl_keyfile": ("kafka", "ssl_keyfile"),
    "batch_size": ("worker", "batch_size"), "batch_within": ("worker", "batch_within"),
    "assembly_bundles": ("worker", "assembly_bundles"),
    "max_message_bytes": ("worker", "max_message_bytes"),
    "consumer_fetch_wait_ms": ("worker", "consumer_fetch_wait_ms"),
    "outage_policy": ("worker", "outage_policy"),
    "outage_max_backoff": ("worker", "outage_max_backoff"),
    "outage_threshold": ("worker", "outage_threshold"),
    "stop_deadline_seconds": ("worker", "stop_deadline_seconds"),
    "stall_seconds": ("worker", "stall_seconds"),
    "kafka_trouble_seconds": ("worker", "kafka_trouble_seconds"),
    "web_port": ("worker", "web_port"), "web_host": ("worker", "web_host"),
    "window_seconds": ("windows", "window_seconds"),
    "window_expires_seconds": ("windows", "window_expires_seconds"),
    "judgment_bundles": ("windows", "judgment_bundles"),
    "group_labels": ("windows", "group_labels"), "version_label": ("windows", "version_label"),
    "alert_rules": ("windows", "alert_rules"),
    "alert_webhook_url": ("windows", "alert_webhook_url"),
    "alert_webhook_timeout": ("windows", "alert_webhook_timeout"),
    "alert_examples": ("windows", "alert_examples"),
    "metrics_max_groups": ("windows", "metrics_max_groups"),
    "sample_rate": ("sampling", "sample_rate"), "sample_rules": ("sampling", "sample_rules"),
    "budget_usd_per_hour": ("sampling", "budget_usd_per_hour"),
    "budget_tokens_per_hour": ("sampling", "budget_tokens_per_hour"),
    "budget_min_sample_rate": ("sampling", "budget_min_sample_rate"),
    "budget_step_seconds": ("sampling", "budget_step_seconds"),
    "escalate_model": ("escalation", "model"), "escalate_api_base": ("escalation", "api_base"),
    "escalate_api_key": ("escalation", "api_key"), "escalate_band": ("escalation", "band"),
    "input_format": ("inputs", "input_format"), "input_mapping": ("inputs", "input_mapping"),
    "otlp_labels": ("inputs", "otlp_labels"),
    "conversation_max_chars": ("inputs", "conversation_max_chars"),
    "otlp_endpoint": ("inputs", "otlp_endpoint"),
    "review_users_file": ("review", "review_users_file"),
    "review_topic": ("review", "review_topic"),
    "labels_topic": ("review", "labels_topic"),
    "review_rate_unsafe": ("review", "review_rate_unsafe"),
    "review_rate_safe": ("review", "review_rate_safe"),
    "review_band": ("review", "review_band"),
    "review_lease_seconds": ("review", "review_lease_seconds"),
    "review_protect_pages": ("review", "review_protect_pages"),
    "agreement_min_reviews": ("review", "agreement_min_reviews"),
    "agreement_precision_floor": ("review", "agreement_precision_floor"),
    "agreement_recall_floor": ("review", "agreement_recall_floor"),
    "corrected_min_reviews": ("review", "corrected_min_reviews"),
    "agent_runs": ("runs", "agent_runs"),
    "judge_protocol": ("judge", "protocol"),
    "escalate_on": ("escalation", "on"),
    "judge_protocol_options": ("judge", "protocol_options"),
    "judge_guard_categories": ("judge", "guard_categories"),
    "judge_qwen3guard_controversial": ("judge", "qwen3guard_controversial"),
    "judge_batch_size": ("judge", "batch_size"),
    "run_settle_seconds": ("runs", "run_settle_seconds"),
    "run_idle_seconds": ("runs", "run_idle_seconds"),
    "run_max_spans": ("runs", "run_max_spans"),
    "run_max_bytes": ("runs", "run_max_bytes"),
    "run_memory_bytes": ("runs", "run_memory_bytes"),
    "trajectory_max_chars": ("runs", "trajectory_max_chars"),
    "tool_result_max_chars": ("runs", "tool_result_max_chars"),
    "session_judging": ("sessions", "session_judging"),
    "session_judge_every": ("sessions", "session_judge_every"),
    "session_idle_seconds": ("sessions", "session_idle_seconds"),
    "session_max_turns": ("sessions", "session_max_turns"),
    "session_max_bytes": ("sessions", "session_max_bytes"),
    "session_memory_bytes": ("sessions", "session_memory_bytes"),
    "session_max_chars": ("sessions", "session_max_chars"),
    "session_association_keys": ("sessions", "session_association_keys"),
    "batch_max_requests": ("batch_api", "max_requests"),
    "batch_max_bytes": ("batch_api", "max_bytes"),
    "batch_gather_seconds": ("batch_api", "gather_seconds"),
    "batch_poll_seconds": ("batch_api", "poll_seconds"),
    "batch_poll_max_seconds": ("batch_api", "poll_max_seconds"),
    "batch_completion_window": ("batch_api", "completion_window"),
    "batch_discount": ("batch_api", "discount"),
    "gate": ("gate", "gate"), "approved_topic": ("gate", "approved_topic"),
    "held_topic": ("gate", "held_topic"), "gate_on_error": ("gate", "gate_on_error"),
    "gate_unsure": ("gate", "gate_unsure"), "gate_order": ("gate", "gate_order"),
    "gate_hold_blocks_key": ("gate", "gate_hold_blocks_key"),
    "gate_session_hold": ("gate", "gate_session_hold"),
    "gate_max_waiting": ("gate", "gate_max_waiting"),
    "gate_batch_within": ("gate", "gate_batch_within"),
    "gate_transactional": ("gate", "gate_transactional"),
    "gate_fetch_wait_ms": ("gate", "gate_fetch_wait_ms"),
    "gate_transaction_ms": ("gate", "gate_transaction_ms"),
    "schema_record_format": ("inputs", "schema_record_format"),
    "schema_registry_url": ("registry", "schema_registry_url"),
    "schema_registry_username": ("registry", "schema_registry_username"),
    "schema_registry_password": ("registry", "schema_registry_password"),
    "schema_registry_cafile": ("registry", "schema_registry_cafile"),
    "schema_registry_timeout": ("registry", "schema_registry_timeout"),
    "results_format": ("registry", "results_format"),
    "dlq_format": ("registry", "dlq_format"),
    "alerts_format": ("registry", "alerts_format"),
    "subject_name_strategy": ("registry", "subject_name_strategy"),
}

#: A value for each old name that differs from its default, as an environment string.
SAMPLE_ENV = {
    "judge_model": "openai/other", "judge_api_base": "http://127.0.0.1:1/v1",
    "judge_api_key": "sk-x", "judge_timeout": "7", "judge_max_retries": "1",
    "judge_concurrency": "3", "judge_max_tokens": "99", "judge_temperature": "0.5",
    "judge_structured_output": "false", "judge_logprobs": "false", "judge_transport": "litellm",
    "judge_input_cost_per_token": "1e-06", "judge_output_cost_per_token": "2e-06",
    "rubric_dir": "/tmp/rubrics", "redteam": '{"scoring_mode": "scale_1_5"}',
    "cache_path": "/tmp/c.sqlite", "judge_calls": "per_metric",
    "verdict_thresholds": '{"toxicity": 0.7}',
    "bootstrap_servers": "k:9093", "input_topic": "in", "bootstrap_timeout": "3",
    "results_topic": "out", "dlq_topic": "dlq", "alerts_topic": "al", "judgments_topic": "jd",
    "topic_partitions": "4", "topic_replication": "3", "app_id": "gr2",
    "producer_idempotence": "false",
    "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u",
    "sasl_password": "pw", "ssl_cafile": "/tmp/ca.pem", "ssl_certfile": "/tmp/c.pem",
    "ssl_keyfile": "/tmp/k.pem", "batch_size": "8", "batch_within": "0.5",
    "assembly_bundles": "false",
    "max_message_bytes": "2048", "consumer_fetch_wait_ms": "50", "outage_policy": "record",
    "outage_max_backoff": "5", "outage_threshold": "0.9", "stop_deadline_seconds": "9",
    "stall_seconds": "30", "kafka_trouble_seconds": "12",
    "web_port": "7000", "web_host": "0.0.0.0", "window_seconds": "60",
    "window_expires_seconds": "600", "group_labels": "app,model", "version_label": "release",
    "alert_rules": '[{"metric": "pii", "min_judgments": 5}]',
    "alert_webhook_url": "http://127.0.0.1:1/hook", "alert_webhook_timeout": "2",
    "alert_examples": "1", "metrics_max_groups": "7", "judgment_bundles": "false",
    "sample_rate": "0.25",
    "sample_rules": '[{"match": {"model_version": "v2"}, "rate": 1.0}, {"first_per_version": 50}]',
    "budget_usd_per_hour": "2.5", "budget_tokens_per_hour": "100000",
    "budget_min_sample_rate": "0.05", "budget_step_seconds": "10",
    "escalate_model": "openai/strong", "escalate_api_base": "http://127.0.0.1:2/v1",
    "escalate_api_key": "sk-esc", "escalate_band": "0.3,0.7",
    "input_format": "mapping", "input_mapping": '{"output": "response.text"}',
    "otlp_labels": '{"team": ["app.team"]}', "conversation_max_chars": "500",
    "otlp_endpoint": "http://127.0.0.1:4318",
    "review_users_file": "/tmp/users.htpasswd",
    "review_topic": "rv",
    "labels_topic": "lb",
    "review_rate_unsafe": "0.5",
    "review_rate_safe": "0.2",
    "review_band": "0.05",
    "review_lease_seconds": "60",
    "review_protect_pages": "true",
    "agreement_min_reviews": "5",
    "agreement_precision_floor": "0.8",
    "agreement_recall_floor": "0.6",
    "corrected_min_reviews": "3",
    "agent_runs": "false",
    "judge_protocol": "llama_guard",
    "escalate_on": "both",
    "judge_protocol_options": '{"flavor": "granite3.3"}',
    "judge_guard_categories": '{"metrics": {"toxicity": ["S1"]}}',
    "judge_qwen3guard_controversial": "safe",
    "judge_batch_size": "8",
    "run_settle_seconds": "2",
    "run_idle_seconds": "60",
    "run_max_spans": "50",
    "run_max_bytes": "100000",
    "run_memory_bytes": "5000000",
    "trajectory_max_chars": "4000",
    "tool_result_max_chars": "500",
    "session_judging": "false",
    "session_judge_every": "1",
    "session_idle_seconds": "60",
    "session_max_turns": "20",
    "session_max_bytes": "50000",
    "session_memory_bytes": "5000000",
    "session_max_chars": "5000",
    "session_association_keys": "chat_id,session_id",
    "batch_max_requests": "1000",
    "batch_max_bytes": "5000000",
    "batch_gather_seconds": "0.5",
    "batch_poll_seconds": "1",
    "batch_poll_max_seconds": "60",
    "batch_completion_window": "48h",
    "batch_discount": "0.4",
    "gate": "true", "approved_topic": "ok", "held_topic": "no", "gate_on_error": "pass",
    "gate_unsure": "pass", "gate_order": "partition", "gate_hold_blocks_key": "true",
    "gate_session_hold": "true", "gate_max_waiting": "50", "gate_transactional": "true",
    "gate_batch_within": "0.02", "gate_fetch_wait_ms": "7", "gate_transaction_ms": "20",
    "schema_record_format": "otlp", "schema_registry_url": "http://registry:8081",
    "schema_registry_username": "sr", "schema_registry_password": "pw",
    "schema_registry_cafile": "/etc/ca.pem", "schema_registry_timeout": "3",
    "results_format": "avro", "dlq_format": "protobuf", "alerts_format": "json_schema",
    "subject_name_strategy": "record",
}


def _value(settings, name):
    group, field = OLD_NAMES[name]
    return getattr(getattr(settings, group), field)


def test_every_old_name_still_sets_its_setting_by_env_config_and_flag(tmp_path):
    assert set(FLAT_NAMES) == set(OLD_NAMES) == set(SAMPLE_ENV)
    from_env = load_settings(environ={f"GUARDRAIL_{n.upper()}": v for n, v in SAMPLE_ENV.items()})
    defaults = Settings()
    for name in OLD_NAMES:
        assert _value(from_env, name) != _value(defaults, name), name
    # The same values under their old names in a config file, as flags and in Settings(...).
    values = {n: from_env.flat()[n] for n in OLD_NAMES}
    values["judge_api_key"], values["sasl_password"] = "sk-x", "pw"
    values["escalate_api_key"] = "sk-esc"
    values["schema_registry_password"] = "pw"
    config = tmp_path / "old.json"
    config.write_bytes(orjson.dumps(values))
    for built in (load_settings(config, environ={}), load_settings(environ={}, **values),
                  Settings(**values)):
        assert built == from_env


def test_config_files_may_also_nest_settings_by_group(tmp_path):
    config = tmp_path / "g.yaml"
    config.write_text("judge:\n  model: openai/nested\n  timeout: 9\n"
                      "kafka:\n  input_topic: nested-in\nwindow_seconds: 30\n")
    settings = load_settings(config, environ={"GUARDRAIL_JUDGE_CONCURRENCY": "5"},
                             judge_timeout=4)
    assert (settings.judge.model, settings.judge.timeout, settings.judge.concurrency) == (
        "openai/nested", 4, 5)
    assert settings.kafka.input_topic == "nested-in"
    assert settings.windows.window_seconds == 30


def test_settings_env_rebuilds_the_same_settings_in_a_child_process():
    settings = load_settings(environ={f"GUARDRAIL_{n.upper()}": v for n, v in SAMPLE_ENV.items()})
    env = settings_env(settings)
    assert load_settings(environ=env) == settings
    assert settings_env(Settings()) == {}  # only what differs from the defaults travels


def test_precedence_flags_over_config_over_env(tmp_path):
    config = tmp_path / "g.yaml"
    config.write_text("judge_model: openai/from-config\njudge_timeout: 7\n")
    env = {"GUARDRAIL_JUDGE_MODEL": "openai/from-env", "GUARDRAIL_JUDGE_TIMEOUT": "3",
           "GUARDRAIL_JUDGE_CONCURRENCY": "4", "GUARDRAIL_GROUP_LABELS": "model, app"}
    settings = load_settings(config, environ=env, judge_model="openai/from-flag")
    assert settings.judge.model == "openai/from-flag"
    assert settings.judge.timeout == 7
    assert settings.judge.concurrency == 4
    assert settings.windows.group_labels == ("model", "app")
    assert load_settings(config, environ=env).judge.model == "openai/from-config"
    assert load_settings(environ=env).judge.model == "openai/from-env"


def test_config_file_from_env_and_redteam_block(tmp_path):
    config = tmp_path / "g.json"
    config.write_text('{"redteam": {"scoring_mode": "scale_1_5", "metrics": '
                      '[{"name": "pii", "goal": "no personal data"}]}}')
    settings = load_settings(environ={"GUARDRAIL_CONFIG": str(config)})
    assert settings.evaluation.redteam.scoring_mode == "scale_1_5"
    assert settings.evaluation.redteam.metrics[0].name == "pii"


def test_secrets_are_masked_everywhere_they_could_be_printed():
    settings = load_settings(environ={"GUARDRAIL_JUDGE_API_KEY": "sk-very-secret",
                                      "GUARDRAIL_ESCALATE_API_KEY": "sk-escalation-secret"})
    for secret in ("sk-very-secret", "sk-escalation-secret"):
        assert secret not in repr(settings)
        assert secret not in str(settings.public_dict())
    assert settings.public_dict()["escalate_api_key"] == "***"
    assert settings.judge.api_key.get_secret_value() == "sk-very-secret"
    assert settings.secret("escalate_api_key") == "sk-escalation-secret"


def test_escalate_band_is_two_probabilities_low_to_high():
    assert Settings().escalation.band == (0.2, 0.8) and Settings().escalation.model is None
    for raw in ("0.3,0.7", "[0.3, 0.7]", " 0.3 , 0.7 "):
        assert load_settings(environ={"GUARDRAIL_ESCALATE_BAND": raw}).escalation.band == (
            0.3, 0.7)
    assert load_settings(environ={}, escalate_band=[0.5, 0.5]).escalation.band == (0.5, 0.5)
    for bad in ("0.8,0.2", "0.2,1.5", "-0.1,0.5", "0.5", "0.1,0.2,0.3"):
        with pytest.raises(ConfigError, match="escalate_band"):
            load_settings(environ={"GUARDRAIL_ESCALATE_BAND": bad})


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


def test_flat_overrides_beside_whole_groups_win_whatever_the_order():
    base = load_settings(environ={}, judge_api_key="sk-1", input_topic="kept")
    for merged in ({**dict(base), "bootstrap_servers": "b:1", "judge_model": "m"},
                   {"bootstrap_servers": "b:1", "judge_model": "m", **dict(base)}):
        built = Settings.model_validate(merged)
        assert (built.kafka.bootstrap_servers, built.judge.model) == ("b:1", "m")
        assert built.kafka.input_topic == "kept" and built.secret("judge_api_key") == "sk-1"


def test_sample_rules_take_a_rate_or_a_first_per_version_count_not_both():
    rules = load_settings(environ={"GUARDRAIL_SAMPLE_RULES": SAMPLE_ENV["sample_rules"]}
                          ).sampling.sample_rules
    assert (rules[0].match, rules[0].rate, rules[1].first_per_version) == (
        {"model_version": "v2"}, 1.0, 50)
    for bad in ('[{"match": {"app": "x"}}]', '[{"rate": 0.5, "first_per_version": 3}]',
                '[{"rate": 1.5}]', '[{"first_per_version": 0}]'):
        with pytest.raises(ConfigError, match="sample_rules"):
            load_settings(environ={"GUARDRAIL_SAMPLE_RULES": bad})
    with pytest.raises(ConfigError, match="sample_rate"):
        load_settings(environ={"GUARDRAIL_SAMPLE_RATE": "1.5"})
