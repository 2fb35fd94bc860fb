"""guardrail.agents.web: the /rates rows read from the window table's keys."""

from types import SimpleNamespace

from guardrail.agents.web import current_rates
from guardrail.stream.events import window_key


def test_current_rates_split_each_key_into_metric_and_group():
    key = window_key("toxicity", {"model": "a|b", "model_version": "v1"})
    table = SimpleNamespace(data={
        (key, (600.0, 900.0)): {"total": 4, "unsafe": 1, "errors": 0},
        (window_key("pii", {}), (300.0, 600.0)): {"total": 2, "unsafe": 0, "errors": 2}})
    rows = current_rates(table)
    assert [(r["metric"], r["group"]) for r in rows] == [("toxicity", "model=a|b,model_version=v1"),
                                                         ("pii", "")]
    assert (rows[0]["window_start"], rows[0]["unsafe_rate"]) == \
        ("1970-01-01T00:10:00.000+00:00", 0.25)
    assert rows[1]["unsafe_rate"] is None  # errors only: no rate


async def test_health_answers_503_while_paused_on_a_judge_outage_and_200_when_ok():
    import json

    import faust
    from faust.web.drivers.aiohttp import Web

    from guardrail.agents import web
    from guardrail.stream.telemetry import Telemetry

    pages = {}
    app = SimpleNamespace(rebalancing=False,
                          page=lambda path: lambda handler: pages.setdefault(path, handler))
    telemetry = Telemetry()
    web.register(SimpleNamespace(app=app, telemetry=telemetry, settings=None, state={}))
    driver = Web(faust.App("health-test", broker="kafka://127.0.0.1:1"))  # real responses
    ok = await pages["/health"](driver, None)
    assert ok.status == 200 and json.loads(ok.body)["status"] == "ok"
    telemetry.paused.set(1)  # what processing sets while it holds a batch on an outage
    paused = await pages["/health"](driver, None)
    assert paused.status == 503
    assert json.loads(paused.body) == {"status": "paused", "judge_paused": True,
                                       "kafka_trouble": None, "rebalancing": False,
                                       "stalled_partitions": []}
