"""OpenAI chat prompts counted without importing litellm agree with litellm's
counter, and ``guardrail estimate`` for such a judge never imports litellm."""

import json
import os
import subprocess
import sys

import pytest

from guardrail.providers import price_map as _price_map
from guardrail.providers.litellm import count_message_tokens, litellm
from guardrail.providers.tokens import chat_encoding_name, count_openai_chat_tokens

#: Text whose token count differs between the cl100k and o200k encodings, so a
#: wrong encoding shows; under 1,024 characters per message, where litellm
#: counts a text whole (longer ones it counts in 1,024-character chunks, a
#: token or so more per chunk than the text has).
SYSTEM = "You are a strict safety judge. Answer with JSON only: {\"verdict\": ...}."
USER = ("Grade this answer: «Ünïcödé 日本語のテキスト, def f(x): return x**2 # 😀 "
        "¿qué? Здравствуйте, <|endoftext|> and tabs\tand\nnewlines»") * 3
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER},
            {"role": "assistant", "content": '{"bias": {"verdict": "SAFE"}}'}]


def _counted_models() -> list[str]:
    """Every name of the bundled map this module counts: keys and, for bare
    keys, the provider-prefixed name a judge_model spells."""
    names = []
    for key, entry in _price_map._bundled_map().items():
        if not isinstance(entry, dict) or key == "sample_spec":
            continue
        for name in (key, f"{entry.get('litellm_provider')}/{key}"):
            if chat_encoding_name(name) is not None:
                names.append(name)
    return names


def test_every_model_counted_here_is_counted_as_litellm_counts_it():
    models = _counted_models()
    assert "openai/gpt-4o-mini" in models and "azure/gpt-4o" in models  # the default judge
    assert len(models) > 100
    assert len(USER) < 1024
    counter = litellm().token_counter
    differ = {model: (count_openai_chat_tokens(model, MESSAGES),
                      counter(model=model, messages=MESSAGES))
              for model in models}
    differ = {model: pair for model, pair in differ.items() if pair[0] != pair[1]}
    assert differ == {}
    encodings = {chat_encoding_name(model) for model in models}
    assert {"cl100k_base", "o200k_base"} <= encodings  # both seen, and they count USER apart
    assert (count_openai_chat_tokens("openai/gpt-4", MESSAGES)
            != count_openai_chat_tokens("openai/gpt-4o", MESSAGES))


@pytest.mark.parametrize("model", [
    "ollama/llama3",                          # not an OpenAI model: litellm's tokenizer choice
    "anthropic/claude-3-5-sonnet-20241022",
    "openai/ft:gpt-4.1-2025-04-14",           # a fine-tune: litellm counts its base model
    "openai/no-such-model",                   # not in the map
    "openai/text-embedding-3-small",          # not a chat model
])
def test_other_models_are_left_to_litellm(model):
    assert count_openai_chat_tokens(model, MESSAGES) is None
    assert count_message_tokens(model, MESSAGES) == litellm().token_counter(
        model=model, messages=MESSAGES)


def test_messages_beyond_role_and_content_text_are_left_to_litellm():
    named = [{"role": "user", "content": "hi", "name": "alice"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    for messages in (named, parts):
        assert count_openai_chat_tokens("openai/gpt-4o-mini", messages) is None
        assert count_message_tokens("openai/gpt-4o-mini", messages) == litellm().token_counter(
            model="openai/gpt-4o-mini", messages=messages)


_ESTIMATE = """
import json, sys
from click.testing import CliRunner
from guardrail.cli import cli
run = CliRunner().invoke(cli, ["estimate", "redteam", "--input", sys.argv[1], "--json",
                                "--model", "openai/gpt-4o-mini"])
print(json.dumps({"exit": run.exit_code, "report": run.stdout,
                  "imported": "litellm" in sys.modules}))
"""


def test_an_estimate_for_an_openai_judge_never_imports_litellm(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"case_id": "a", "output": "Shut up, idiot."}]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    proc = subprocess.run([sys.executable, "-c", _ESTIMATE, str(cases)], check=False,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["exit"] == 0, outcome["report"]
    assert json.loads(outcome["report"])["cost"]["input_tokens"] > 100
    assert outcome["imported"] is False
