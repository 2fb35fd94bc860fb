"""Judge requests as Anthropic Messages requests; Message Batch results as answers.

The translation both ways is litellm's (``AnthropicConfig``), the one
``litellm.acompletion`` applies to an ``anthropic/`` judge on the synchronous
path. So a batch line's ``params`` are the body the synchronous call would
post (system prompt top-level, ``max_tokens``, the answer schema as
``output_format`` or as a forced ``json_tool_call`` tool, as litellm picks
for the model), and an answer becomes the :class:`Completion` the synchronous
call would return. Anthropic has no log-probabilities: none are asked for,
and the sampled verdicts stand, as on the synchronous path::

    messages = MessagesFormat()
    params, betas = messages.request(chat_body)   # Messages body, anthropic-beta values
    completion = messages.completion(message, chat_body)
    read_results(jsonl, answers, problems)        # a results file, by custom_id
"""

from __future__ import annotations

import copy
from typing import Any

from ..providers.litellm import litellm
from ..judges.answers import Completion
from ..judges.transports import completion_from_response
from .results import BatchRequestError, keyed_lines, not_run, short

__all__ = ["MessagesFormat", "read_results"]

#: Result types of requests the batch never ran (nothing paid): given back.
NOT_RUN = frozenset({"canceled", "expired"})


class MessagesFormat:
    """litellm's Anthropic request and answer translation, used offline."""

    def __init__(self) -> None:
        litellm()  # the offline switches, before litellm's modules load
        from litellm.llms.anthropic.chat.transformation import (
            AnthropicConfig,
            JsonModeRequest,
        )

        self._config = AnthropicConfig()
        self._json_mode = JsonModeRequest

    def _mapped(self, body: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
        """(model, Anthropic parameters, json_mode) of an OpenAI chat body, as
        litellm maps them (``drop_params``, as the judge's litellm calls)."""
        # A deep copy: litellm may annotate the shared, cached answer schema.
        wanted = copy.deepcopy({k: v for k, v in body.items() if k not in ("model", "messages")})
        params = self._config.map_openai_params(wanted, {}, body["model"], drop_params=True)
        return body["model"], params, bool(params.pop("json_mode", False))

    def request(self, body: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        """The Messages request of ``body`` and the ``anthropic-beta`` features
        it needs (the batch's create request carries them)."""
        headers: dict[str, str] = {}
        try:
            model, params, _ = self._mapped(body)
            messages = [dict(m) for m in body["messages"]]
            request = self._config.transform_request(model, messages, params,
                                                     {"drop_params": True}, headers)
        except Exception as exc:  # noqa: BLE001 - litellm raises many types
            raise BatchRequestError(f"batch request not sent: litellm cannot write it as an "
                                    f"Anthropic Messages request ({type(exc).__name__}: "
                                    f"{short(str(exc))})") from None
        betas = str(headers.get("anthropic-beta") or "").split(",")
        return request, frozenset(b.strip() for b in betas if b.strip())

    def completion(self, message: dict[str, Any], body: dict[str, Any]) -> Completion:
        """A succeeded result's message, read as the synchronous answer would be."""
        import httpx  # litellm's own dependency
        from litellm.types.utils import ModelResponse

        try:
            _, params, json_mode = self._mapped(body)
            schema = self._json_mode.model_validate(params).tool_schema() if json_mode else None
            response = self._config.transform_parsed_response(
                completion_response=copy.deepcopy(message), raw_response=httpx.Response(200),
                model_response=ModelResponse(), json_mode=json_mode,
                response_format_schema=schema)
        except Exception as exc:  # noqa: BLE001 - a malformed answer is this request's error
            raise BatchRequestError(f"batch request failed: the answer is not a Messages "
                                    f"response ({type(exc).__name__}: {short(str(exc))}): "
                                    f"{short(message)}") from None
        return completion_from_response(response)


def read_results(content: bytes, answers: dict[str, dict[str, Any]],
                 problems: dict[str, BatchRequestError]) -> None:
    """Sort a Message Batch's result lines (in any order) into answers (the
    succeeded messages) and problems, by ``custom_id``."""
    for custom_id, line in keyed_lines(content):
        result = line.get("result")
        kind = result.get("type") if isinstance(result, dict) else None
        if kind == "succeeded" and isinstance(result.get("message"), dict):  # type: ignore[union-attr]
            answers[custom_id] = result["message"]  # type: ignore[index]
        elif kind in NOT_RUN:
            problems[custom_id] = not_run(f"{kind}")
        elif kind == "errored":
            problems[custom_id] = BatchRequestError(f"batch request failed: "
                                                    f"{_error_text(result)}")
        else:
            problems[custom_id] = BatchRequestError(f"batch request failed: not a result "
                                                    f"line: {short(line)}")


def _error_text(result: Any) -> str:
    """``type: message`` of an errored result (``{"error": {"type": "error",
    "error": {"type", "message"}}}``), whatever part of it is there."""
    error = result.get("error")
    inner = error.get("error") if isinstance(error, dict) else None
    detail = inner if isinstance(inner, dict) else error if isinstance(error, dict) else {}
    kind = detail.get("type") if detail.get("type") not in (None, "error") else "error"
    message = detail.get("message")
    return f"{kind}: {short(message if message is not None else error)}"
