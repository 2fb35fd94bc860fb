"""The LLM judge: one prompt, one call, validated answers for its metrics.

A judge is any async callable matching :class:`~guardrail.judging.judge.Judge`; :class:`LLMJudge`
reaches every provider litellm knows (``openai/...``, ``anthropic/...``,
``ollama/...``, ``hosted_vllm/...``) through a :mod:`transport <guardrail.judges.transports>`
chosen once from its settings::

    judge = LLMJudge(load_settings(judge_model="openai/gpt-4o-mini").judge)
    reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
    reply.answer.verdict   # "SAFE" | "UNSAFE"
    group = await judge.judge_group(group_prompt, scoring_mode="binary_yes_no",
                                    include_reasoning=False)
    group.answers["toxicity"], group.usage["toxicity"]   # answer or error, its share
    await judge.aclose()

Calls share one concurrency limit, have a timeout, and retry 429/5xx/timeouts
with backoff. A garbled answer gets one repair retry; anything still invalid
raises :class:`JudgeAnswerError` — the caller records it as the metric's
error, never as SAFE. Refused or missing credentials and an unknown model or
endpoint raise :class:`~guardrail.errors.JudgeConfigError` at once (no retry):
a setting to fix, not an outage to wait out. In a several-metric call, only the
metrics whose entries were invalid are asked again, and only those carry an
error if the repair fails.

With ``judge_logprobs`` (default) each reply also carries P(UNSAFE) read
from the answer's token log-probabilities (:mod:`guardrail.judging.probability`;
after a repair retry, from the repaired answer's tokens)::

    reply.probability        # 0.81, or None when the provider sent none
    reply.severity_probs     # scale_1_5: {1: 0.02, …, 5: 0.01}
    group.probabilities["toxicity"]
    judge.probabilities_available   # False once an answer came without them

An answer without log-probabilities is judged by its sampled verdict, and the
judge says so once in the log (not per message).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from ..providers.litellm import price_tokens
from ..errors import JudgeAnswerError, JudgeConfigError, JudgeError, JudgeUnavailable
from ..judging.judge import GroupReply, JudgeReply, Usage
from ..judging.models import ScoringMode
from ..judging.parsing import (BinaryAnswer, group_response_schema, parse_answer,
                               parse_group_answer, response_schema)
from ..judging.probability import AnswerTokens, Reading
from ..judging.prompts import JudgePrompt
from .settings import JudgeSettings
from .transports import Completion, Transport, make_transport, status_of

__all__ = ["LLMJudge", "LiteLLMJudge"]

log = logging.getLogger("guardrail.judge")  # the name users configure logging by

_REPAIR = (
    "Your previous answer was not valid: {error}. Reply again with only the JSON "
    "object, exactly the keys asked for, no other text."
)
_REPAIR_GROUP = (
    "Your previous answer was not valid for {names}: {error}. Reply again with only a JSON "
    "object with exactly the keys {keys}, each an object with the keys asked for, no other "
    "text."
)


class LLMJudge:
    """A :class:`~guardrail.judging.judge.Judge` that asks an LLM through a
    :class:`~guardrail.judges.transports.Transport`."""

    def __init__(self, settings: JudgeSettings, *, transport: Transport | None = None) -> None:
        self.model = settings.model
        self._settings = settings
        self._limit = asyncio.Semaphore(settings.concurrency)
        self._secret = settings.api_key.get_secret_value() if settings.api_key else None
        self._transport = transport or make_transport(settings)
        #: None until an answer came; False once one came without log-probabilities
        #: (its verdict is the sampled one), True while every answer had them.
        self.probabilities_available: bool | None = None
        self._said_no_logprobs = False

    @property
    def logprobs(self) -> bool:
        """Whether this judge asks for log-probabilities (``judge_logprobs``)."""
        return self._settings.logprobs

    @property
    def transport(self) -> str:
        """``"http"`` (direct) or ``"litellm"``."""
        return self._transport.name

    async def aclose(self) -> None:
        """Release the transport's connections, if any (idempotent)."""
        await self._transport.aclose()

    async def __call__(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                       include_reasoning: bool) -> JudgeReply:
        usage = Usage()
        fmt = response_schema(scoring_mode, include_reasoning)
        messages = list(prompt.messages)
        completion = await self._complete(messages, fmt, usage)
        try:
            answer = parse_answer(completion.content, scoring_mode=scoring_mode,
                                  include_reasoning=include_reasoning, judged=prompt.judged)
        except JudgeAnswerError as first:
            messages += [{"role": "assistant", "content": completion.content[:4000]},
                         {"role": "user", "content": _REPAIR.format(error=first)}]
            completion = await self._complete(messages, fmt, usage)
            try:
                answer = parse_answer(completion.content, scoring_mode=scoring_mode,
                                      include_reasoning=include_reasoning, judged=prompt.judged)
            except JudgeAnswerError as second:
                raise _with_usage(JudgeAnswerError(f"{second} (after one repair retry)"),
                                  usage) from None
        reading = self._readings(completion, scoring_mode).get(None, Reading(None))
        return JudgeReply(answer=answer, usage=usage, probability=reading.unsafe,
                          severity_probs=reading.severity)

    async def judge_group(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                          include_reasoning: bool) -> GroupReply:
        """Judge every metric of a :func:`~guardrail.judging.prompts.render_group_prompt` prompt
        in one call. Raises :class:`JudgeError` (with ``.usage``) only when no
        answer came back at all; a bad entry is that metric's error."""
        metrics, usage = prompt.metrics, Usage()
        messages = list(prompt.messages)
        completion = await self._complete(messages, group_response_schema(
            metrics, scoring_mode, include_reasoning), usage, metrics=len(metrics))
        answers = self._parse_group(completion.content, metrics, scoring_mode,
                                    include_reasoning, prompt)
        readings = self._readings(completion, scoring_mode, metrics)
        shares = dict(zip(metrics, usage.split(len(metrics))))
        failed = tuple(m for m in metrics if isinstance(answers[m], JudgeAnswerError))
        if failed:
            messages += [{"role": "assistant", "content": completion.content[:4000]},
                         {"role": "user", "content": _repair_group(failed, answers)}]
            again, repair, fresh = await self._ask_again(messages, failed, scoring_mode,
                                                         include_reasoning, prompt)
            readings.update(fresh)  # a repaired entry is read from the repaired answer
            for metric, share in zip(failed, repair.split(len(failed))):
                answer = again[metric]
                answers[metric] = (JudgeAnswerError(f"{answer} (after one repair retry)")
                                   if isinstance(answer, JudgeAnswerError) else answer)
                shares[metric].add(share.input_tokens, share.output_tokens, share.cost,
                                   share.cached_tokens, share.seconds)
        valid = [m for m in metrics if not isinstance(answers[m], JudgeError)]
        known = {m: readings.get(m, Reading(None)) for m in valid}
        return GroupReply(answers=answers, usage=shares,
                          probabilities={m: r.unsafe for m, r in known.items()},
                          severity_probs={m: r.severity for m, r in known.items()})

    async def _ask_again(self, messages: list[dict[str, str]], failed: tuple[str, ...],
                         scoring_mode: ScoringMode, include_reasoning: bool, prompt: JudgePrompt,
                         ) -> tuple[dict[str, BinaryAnswer | JudgeError], Usage,
                                    dict[str | None, Reading]]:
        """The repair call of a several-metric answer, for the ``failed`` metrics only."""
        repair = Usage()
        try:
            completion = await self._complete(messages, group_response_schema(
                failed, scoring_mode, include_reasoning), repair, metrics=len(failed))
        except JudgeError as exc:  # the first answer's valid entries stand
            return dict.fromkeys(failed, exc), getattr(exc, "usage", None) or repair, {}
        again = self._parse_group(completion.content, failed, scoring_mode, include_reasoning,
                                  prompt)
        return again, repair, self._readings(completion, scoring_mode, failed)

    def _readings(self, completion: Completion, scoring_mode: ScoringMode,
                  metrics: tuple[str, ...] | None = None) -> dict[str | None, Reading]:
        """P(UNSAFE) at each verdict of an answer (key None: a one-metric answer)."""
        self._note_logprobs(completion.logprobs is not None)
        if completion.logprobs is None:
            return {}
        tokens = AnswerTokens(completion.logprobs)
        if metrics is None:
            return {None: tokens.reading(scoring_mode)}
        return {m: tokens.reading(scoring_mode, metric=m) for m in metrics}

    def _note_logprobs(self, present: bool) -> None:
        """Say once, not per message, that verdicts are the sampled ones."""
        if present:
            if self.probabilities_available is None:
                self.probabilities_available = True
            return
        self.probabilities_available = False
        if self._said_no_logprobs:
            return
        self._said_no_logprobs = True
        if not self._settings.logprobs:
            why = "judge_logprobs is off"
        elif not getattr(self._transport, "asks_logprobs", True):
            why = "the provider takes no log-probabilities"
        else:
            why = "its answers carry no log-probabilities"
        log.warning("judge %s: %s, so its sampled verdicts stand (verdict_thresholds do "
                    "not apply and probability_unsafe stays empty)", self.model, why)

    @staticmethod
    def _parse_group(text: str, metrics: tuple[str, ...], scoring_mode: ScoringMode,
                     include_reasoning: bool, prompt: JudgePrompt,
                     ) -> dict[str, BinaryAnswer | JudgeError]:
        try:
            return dict(parse_group_answer(text, metrics, scoring_mode=scoring_mode,
                                           include_reasoning=include_reasoning,
                                           judged=prompt.judged))
        except JudgeAnswerError as whole:  # nothing usable: every metric is asked again
            return dict.fromkeys(metrics, whole)

    async def _complete(self, messages: list[dict[str, str]], fmt: dict[str, Any],
                        usage: Usage, *, metrics: int = 1) -> Completion:
        """One answer, retried on transient failures. ``judge_max_tokens`` is a
        budget per metric: an answer for several metrics may be that much longer."""
        attempts = self._settings.max_retries + 1
        last: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(8.0, 0.25 * 2 ** attempt) * (0.5 + random.random()))
            try:
                return await self._call_once(messages, fmt, usage, metrics)
            except JudgeError:
                raise
            except Exception as exc:  # classified below; providers raise many types
                last = exc
                # Before the retry check: litellm reports a missing OpenAI key as a 500.
                setting = self._transport.config_setting(exc)
                if setting is not None:
                    raise _with_usage(self._config_error(setting, exc), usage) from None
                if not self._transport.is_transient(exc):
                    raise _with_usage(JudgeError(f"judge call failed: {self._describe(exc)}"),
                                      usage) from None
        raise _with_usage(JudgeUnavailable(
            f"judge unavailable after {attempts} attempts: {self._describe(last)}"), usage)

    async def _call_once(self, messages: list[dict[str, str]], fmt: dict[str, Any],
                         usage: Usage, metrics: int = 1) -> Completion:
        s = self._settings
        async with self._limit:
            started = time.perf_counter()  # inside the limit: queueing is not the judge's
            try:
                # A deadline on this task, not wait_for's extra task per call.
                async with asyncio.timeout(s.timeout + 1.0):
                    completion = await self._transport.complete(
                        messages, fmt if s.structured_output else None,
                        max_tokens=s.max_tokens * metrics if metrics > 1 else None)
            finally:  # a failed attempt took the judge's time too
                usage.seconds += time.perf_counter() - started
        # Let the call that the released slot woke leave first: answers tend to
        # come back together, and reading one (log-probabilities, parsing,
        # scoring) before the next call is sent would add up to a wave's
        # worth of reading to every call's round trip.
        await asyncio.sleep(0)
        usage.add(completion.prompt_tokens, completion.completion_tokens, price_tokens(
            s.model, completion.prompt_tokens, completion.completion_tokens,
            cached_tokens=completion.cached_tokens,
            input_cost_per_token=s.input_cost_per_token,
            output_cost_per_token=s.output_cost_per_token), completion.cached_tokens)
        content = completion.content
        if not isinstance(content, str) or not content.strip():
            raise _with_usage(JudgeAnswerError("judge returned an empty answer"), usage)
        return completion

    def _config_error(self, setting: str, exc: BaseException) -> JudgeConfigError:
        """One line naming the setting to fix; the key itself is never in it."""
        s = self._settings
        if setting == "judge_api_key":
            problem = ("the judge refused the API key" if self._secret
                       else "the judge needs an API key and judge_api_key is not set")
        elif setting == "judge_model":
            problem = f"the judge does not know the model {s.model!r}"
        else:
            problem = f"the judge endpoint {s.api_base} has no chat completions route"
        return JudgeConfigError(
            f"judge configuration error: {problem} ({self._describe(exc)}); check {setting} "
            f"(GUARDRAIL_{setting.upper()})", setting=setting)

    def _describe(self, exc: BaseException | None) -> str:
        if exc is None:
            return "unknown error"
        if isinstance(exc, asyncio.TimeoutError):
            return f"timed out after {self._settings.timeout:g}s"
        status = status_of(exc)
        message = " ".join(str(exc).split())
        if self._secret:  # before cutting: a key cut in half would no longer match
            message = message.replace(self._secret, "***")
        message = message[:300]
        prefix = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")
        return f"{prefix}: {message}" if message else prefix


#: The name this judge had before it had more than one transport.
LiteLLMJudge = LLMJudge


def _repair_group(failed: tuple[str, ...], answers: dict[str, Any]) -> str:
    errors = {str(answers[m]) for m in failed}
    error = errors.pop() if len(errors) == 1 else "; ".join(
        f"{m}: {answers[m]}" for m in failed)
    names = ", ".join(failed)
    return _REPAIR_GROUP.format(names=names, error=error,
                                keys=", ".join(f'"{m}"' for m in failed))


def _with_usage(exc: JudgeError, usage: Usage) -> JudgeError:
    exc.usage = usage  # type: ignore[attr-defined]
    return exc
