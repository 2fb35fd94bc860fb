"""Alert decisions over windowed counts, and delivery to a real webhook and a topic."""

import asyncio

import pytest
from aiohttp import web

from guardrail.stream.settings import AlertRule
from guardrail.stream.alerts import (AlertDispatcher, Cooldown, WindowCounts, check_rule, rule_for,
                                     two_proportion_p_value)

# --- the two-proportion test ------------------------------------------------------


def test_p_value_is_one_half_for_equal_proportions():
    assert two_proportion_p_value(10, 100, 10, 100) == pytest.approx(0.5)
    assert two_proportion_p_value(5, 50, 20, 200) == pytest.approx(0.5)


def test_p_value_is_tiny_when_current_is_much_higher():
    assert two_proportion_p_value(30, 100, 5, 100) < 1e-4


def test_p_value_is_near_one_when_current_is_lower():
    assert two_proportion_p_value(5, 100, 30, 100) > 0.999


def test_p_value_grows_as_the_gap_narrows():
    p_values = [two_proportion_p_value(x, 100, 10, 100) for x in (40, 30, 20, 15, 10)]
    assert p_values == sorted(p_values)


@pytest.mark.parametrize("args", [(0, 0, 5, 100), (3, 10, 0, 0), (0, 0, 0, 0)])
def test_p_value_with_an_empty_side_is_one(args):
    assert two_proportion_p_value(*args) == 1.0


@pytest.mark.parametrize("args", [(0, 50, 0, 80), (50, 50, 80, 80)])
def test_p_value_with_no_variance_is_one(args):
    assert two_proportion_p_value(*args) == 1.0


# --- counts -----------------------------------------------------------------------


def test_errors_are_excluded_from_the_rate():
    counts = WindowCounts(total=30, unsafe=5, errors=10)
    assert counts.judged == 20
    assert counts.rate == pytest.approx(0.25)
    assert WindowCounts(total=4, errors=4).rate is None
    assert WindowCounts().rate is None


def test_seen_is_coverage_only_and_old_cells_read_it_as_their_total():
    sampled = WindowCounts(total=10, unsafe=2, seen=40)
    assert (sampled.judged, sampled.rate) == (10, 0.2)  # over the judged, never the seen
    assert WindowCounts.from_dict({"total": 6, "unsafe": 1}).seen == 6  # before sampling
    assert (sampled + WindowCounts(total=5, seen=5)).seen == 45
    assert check_rule(ABSOLUTE, WindowCounts(total=19, unsafe=19, seen=1000), None) == []
    p = two_proportion_p_value(12, 40, 3, 120)
    reasons = check_rule(REGRESSION, WindowCounts(total=40, unsafe=12, seen=400),
                         WindowCounts(total=120, unsafe=3, seen=9000))
    assert f"p={p:.2g}" in reasons[0]  # the z-test on judged counts only


def test_counts_add_and_round_trip():
    total = WindowCounts(10, 2, 1) + WindowCounts(5, 1, 0)
    assert (total.total, total.unsafe, total.errors) == (15, 3, 1)
    counts = WindowCounts(7, 3, 1, examples=[{"case_id": "c"}])
    assert WindowCounts.from_dict(counts.as_dict()) == counts
    assert WindowCounts.from_dict(None) == WindowCounts()


# --- rules --------------------------------------------------------------------------

ABSOLUTE = AlertRule(max_unsafe_rate=0.2, min_judgments=20, baseline_windows=0)
REGRESSION = AlertRule(max_unsafe_rate=None, min_judgments=20, significance=0.01)


def test_no_rule_fires_below_min_judgments():
    assert check_rule(ABSOLUTE, WindowCounts(total=19, unsafe=19), None) == []
    assert check_rule(ABSOLUTE, WindowCounts(total=20, unsafe=20), None) != []


def test_min_judgments_counts_verdicts_not_errors():
    # 30 messages, but only 19 have a verdict.
    assert check_rule(ABSOLUTE, WindowCounts(total=30, unsafe=19, errors=11), None) == []


def test_absolute_rule_fires_above_the_rate_and_names_both_rates():
    reasons = check_rule(ABSOLUTE, WindowCounts(total=100, unsafe=30), None)
    assert len(reasons) == 1
    assert "30.0%" in reasons[0] and "20.0%" in reasons[0]
    assert check_rule(ABSOLUTE, WindowCounts(total=100, unsafe=20), None) == []
    assert check_rule(ABSOLUTE, WindowCounts(total=100, unsafe=5), None) == []


def test_absolute_rate_ignores_errors():
    # 5 unsafe of 20 judged is 25%; counting the 10 errors would give 16.7%.
    reasons = check_rule(ABSOLUTE, WindowCounts(total=30, unsafe=5, errors=10), None)
    assert reasons and "25.0%" in reasons[0]


def test_absolute_rule_off():
    rule = AlertRule(max_unsafe_rate=None, baseline_windows=0)
    assert check_rule(rule, WindowCounts(total=100, unsafe=100), None) == []


def test_regression_rule_fires_on_a_real_jump():
    reasons = check_rule(REGRESSION, WindowCounts(total=40, unsafe=12),
                         WindowCounts(total=120, unsafe=3))
    assert len(reasons) == 1
    assert "regression" in reasons[0]
    assert "30.0%" in reasons[0] and "2.5%" in reasons[0]


def test_regression_rule_ignores_noise_and_improvements():
    assert check_rule(REGRESSION, WindowCounts(total=100, unsafe=6),
                      WindowCounts(total=100, unsafe=5)) == []
    assert check_rule(REGRESSION, WindowCounts(total=100, unsafe=2),
                      WindowCounts(total=100, unsafe=30)) == []


def test_regression_needs_a_baseline_with_enough_judgments():
    current = WindowCounts(total=40, unsafe=12)
    assert check_rule(REGRESSION, current, None) == []
    assert check_rule(REGRESSION, current, WindowCounts(total=19, unsafe=0)) == []
    # Errors in the baseline do not count towards its size.
    assert check_rule(REGRESSION, current, WindowCounts(total=40, unsafe=0, errors=25)) == []


def test_both_rules_can_fire_together():
    rule = AlertRule(max_unsafe_rate=0.2, min_judgments=20)
    reasons = check_rule(rule, WindowCounts(total=40, unsafe=12),
                         WindowCounts(total=120, unsafe=3))
    assert len(reasons) == 2
    assert "above" in reasons[0] and "regression" in reasons[1]


def test_rule_for_prefers_the_exact_metric_over_the_wildcard():
    wildcard = AlertRule(metric="*", max_unsafe_rate=0.5)
    toxicity = AlertRule(metric="toxicity", max_unsafe_rate=0.05)
    rules = (wildcard, toxicity)
    assert rule_for(rules, "toxicity") is toxicity
    assert rule_for(rules, "pii") is wildcard
    assert rule_for((toxicity,), "pii") is None
    assert rule_for((), "toxicity") is None


# --- cooldown -------------------------------------------------------------------------


def test_cooldown_suppresses_repeats_within_the_window():
    cooldown = Cooldown()
    assert cooldown.ready("toxicity|model=m", now=1000.0, seconds=60)
    assert not cooldown.ready("toxicity|model=m", now=1030.0, seconds=60)
    assert not cooldown.ready("toxicity|model=m", now=1059.9, seconds=60)
    # Suppressed repeats do not extend the window.
    assert cooldown.ready("toxicity|model=m", now=1060.0, seconds=60)
    assert not cooldown.ready("toxicity|model=m", now=1061.0, seconds=60)


def test_cooldown_is_per_key():
    cooldown = Cooldown()
    assert cooldown.ready("a", now=0.0, seconds=900)
    assert cooldown.ready("b", now=1.0, seconds=900)
    assert not cooldown.ready("a", now=2.0, seconds=900)


def test_zero_cooldown_never_suppresses():
    cooldown = Cooldown()
    assert cooldown.ready("a", now=5.0, seconds=0)
    assert cooldown.ready("a", now=5.0, seconds=0)


# --- delivery -------------------------------------------------------------------------


class Webhook:
    """A tiny HTTP server on loopback that answers with scripted statuses."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.received = []
        self.runner = None
        self.url = None

    async def handle(self, request):
        self.received.append(await request.json())
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return web.json_response({"ok": status < 300}, status=status)

    async def __aenter__(self):
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/hook"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


ALERT = {"alert_id": "a1", "metric": "toxicity", "group": {"model": "m"},
         "reasons": ["unsafe rate 30.0% above 20.0%"], "rate": 0.3}


async def test_dispatcher_posts_the_alert_to_the_webhook():
    async with Webhook([200]) as hook:
        dispatcher = AlertDispatcher(webhook_url=hook.url, timeout=5, retries=1)
        dispatcher.dispatch(ALERT)
        await dispatcher.drain()
    assert hook.received == [ALERT]
    assert (dispatcher.delivered, dispatcher.failed) == (1, 0)


async def test_dispatcher_retries_after_a_server_error():
    async with Webhook([500, 200]) as hook:
        dispatcher = AlertDispatcher(webhook_url=hook.url, timeout=5, retries=1)
        dispatcher.dispatch(ALERT)
        await dispatcher.drain()
    assert hook.received == [ALERT, ALERT]
    assert (dispatcher.delivered, dispatcher.failed) == (1, 0)


async def test_dispatcher_gives_up_after_its_retries():
    async with Webhook([503]) as hook:
        dispatcher = AlertDispatcher(webhook_url=hook.url, timeout=5, retries=1)
        dispatcher.dispatch(ALERT)
        await dispatcher.drain()
    assert len(hook.received) == 2  # the first attempt and one retry
    assert (dispatcher.delivered, dispatcher.failed) == (0, 1)


async def test_dispatcher_gives_up_on_an_unreachable_webhook():
    async with Webhook([200]) as hook:
        url = hook.url
    # The server is gone: connections are refused.
    dispatcher = AlertDispatcher(webhook_url=url, timeout=2, retries=0)
    dispatcher.dispatch(ALERT)
    await dispatcher.drain()
    assert (dispatcher.delivered, dispatcher.failed) == (0, 1)


async def test_dispatcher_writes_to_the_topic_and_the_webhook():
    sent = []

    async def send_to_topic(alert):
        sent.append(alert)

    async with Webhook([200]) as hook:
        dispatcher = AlertDispatcher(webhook_url=hook.url, timeout=5, retries=0,
                                     send_to_topic=send_to_topic)
        dispatcher.dispatch(ALERT)
        dispatcher.dispatch({**ALERT, "alert_id": "a2"})
        await dispatcher.drain()
    assert sorted(a["alert_id"] for a in sent) == ["a1", "a2"]
    assert sorted(a["alert_id"] for a in hook.received) == ["a1", "a2"]
    assert dispatcher.delivered == 2


async def test_dispatcher_without_webhook_only_uses_the_topic():
    sent = []

    async def send_to_topic(alert):
        sent.append(alert)

    dispatcher = AlertDispatcher(webhook_url=None, timeout=5, send_to_topic=send_to_topic)
    dispatcher.dispatch(ALERT)
    await dispatcher.drain()
    assert sent == [ALERT]
    assert (dispatcher.delivered, dispatcher.failed) == (0, 0)


async def test_a_failing_topic_does_not_stop_the_webhook():
    async def broken_topic(alert):
        raise RuntimeError("broker down")

    async with Webhook([200]) as hook:
        dispatcher = AlertDispatcher(webhook_url=hook.url, timeout=5, retries=0,
                                     send_to_topic=broken_topic)
        dispatcher.dispatch(ALERT)
        await dispatcher.drain()
    assert hook.received == [ALERT]
    assert dispatcher.delivered == 1


async def test_dispatch_does_not_wait_for_delivery():
    release = asyncio.Event()
    sent = []

    async def slow_topic(alert):
        await release.wait()
        sent.append(alert)

    dispatcher = AlertDispatcher(webhook_url=None, timeout=5, send_to_topic=slow_topic)
    dispatcher.dispatch(ALERT)  # returns at once although the topic is blocked
    assert sent == []
    release.set()
    await dispatcher.drain()
    assert sent == [ALERT]


async def test_the_alert_log_line_names_a_session_alerts_unit(caplog):
    dispatcher = AlertDispatcher(webhook_url=None, timeout=1)
    with caplog.at_level("WARNING", logger="guardrail.alerts"):
        dispatcher.dispatch({"alert_id": "a" * 32, "kind": "regression", "metric": "toxicity",
                             "group": {"model": "m", "unit": "session"}, "unit": "session",
                             "reasons": ["unsafe rate 50.0% above 20.0%"]})
        dispatcher.dispatch({"kind": "budget", "reasons": ["sampling less"]})
        await dispatcher.drain()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALERT")]
    assert lines == ["ALERT toxicity {'model': 'm', 'unit': 'session'} unit: session: unsafe rate "
                     "50.0% above 20.0%", "ALERT budget : sampling less"]
