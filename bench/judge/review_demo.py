"""The demo's 16 answers judged, then reviewed against their truth labels: the
judge's agreement with a reviewer and the corrected unsafe rates, end to end.

    python bench/judge/review_demo.py [--judge rules|local] [--out bench/results/review_demo.json]
                                [--screenshot docs/img/agreement.png]

Starts the embedded broker, a judge (``rules``: the stand-in rule judge,
``python -m guardrail.local.rule_judge``, seconds; ``local``: ``guardrail judge
serve``, the bundled 1.5B model, a few minutes on 2 cores) and one worker with
the review queue on (a users file with one reviewer, bcrypt). Every result is
sent to review (``review_rate_unsafe = review_rate_safe = 1``, so every review
weighs 1) and a corrected rate needs 3 reviews of each judge verdict
(``corrected_min_reviews = 3``); the dashboard shows precision and recall
once a version's 8 answers are reviewed (``agreement_min_reviews = 8``, not
20); one window of an hour holds all 16 answers.

It produces the 16 answers of ``guardrail/demo/samples.jsonl`` (metadata
``model=shop-assistant``, ``model_version`` v1 / v2, as the demo stamps them),
waits for their 16 results, then acts as the reviewer through the JSON API of
``/review`` (HTTP basic auth): for each item it holds, per metric, ``agree``
when the judge's verdict matches the sample's ``truth`` label, else
``disagree_safe`` / ``disagree_unsafe``; until the queue is empty. Then it
reads ``/agreement`` and ``/rates`` and prints per metric and version: reviews,
precision and recall with their 95 % intervals, the observed unsafe rate, the
corrected one with its interval (or the worker's note why there is none) and
the truth's own rate. An extra row per metric, ``all``, pools both versions:
computed here from the labels topic and the ``/rates`` counts with the
product's own functions (:mod:`guardrail.stream.agreement`), since the worker
keeps one figure per group (model, model_version, prompt_version).

``--screenshot PATH`` saves ``/dashboard?refresh=0`` (its agreement panel and
rates) from headless Chromium (Playwright) before everything is stopped.
Everything started is stopped on the way out, also on errors and Ctrl-C.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import base64
import json
import math
import secrets
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import bcrypt
from bench.common import PY, ROOT, meta

from guardrail._processes import Child, guardrail_argv
from guardrail.demo.runner import load_samples
from guardrail.kafka.broker import EmbeddedBroker
from guardrail.review import LabelRecord
from guardrail.stream.agreement import Confusion, corrected_rate
from tests.support.harness import StreamEnv, consume, produce

MODEL = "shop-assistant"
WINDOW_SECONDS = 3600
CORRECTED_MIN_REVIEWS = 3
#: Fewest reviews before the dashboard shows precision and recall (default 20):
#: a version's 8 answers. Also the agreement alert's minimum, which then never
#: fires here (precision and recall rest on fewer than 8 reviews each); with 3,
#: one fired mid-review on v2's toxicity recall of 2 of the first 3 reviews.
AGREEMENT_MIN_REVIEWS = 8
METRICS = ("toxicity", "bias")
VERSIONS = ("v1", "v2")
REVIEWER = "reviewer"
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)


# -- HTTP ---------------------------------------------------------------------------


class Http:
    def __init__(self, port: int, user: str, password: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(self, path: str, body: Any = None, *, auth: bool = False,
             timeout: float = 30) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = self.auth
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method="POST" if data is not None else "GET")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")


# -- the run ------------------------------------------------------------------------


def truth_table() -> dict[str, dict[str, Any]]:
    samples = load_samples()
    missing = [s["case_id"] for s in samples
               if set(s.get("truth", {})) != set(METRICS)
               or not set(s["truth"].values()) <= {"safe", "unsafe"}]
    if missing:
        raise SystemExit(f"samples without a truth label for {', '.join(METRICS)}: {missing}")
    return {s["case_id"]: s for s in samples}


def records(samples: dict[str, dict[str, Any]], now: float) -> list[tuple]:
    """The input records: as the demo stamps them (case_id, input, output,
    timestamp, metadata model / model_version), all in the current window."""
    window_start = math.floor(now / WINDOW_SECONDS) * WINDOW_SECONDS
    base = max(window_start + 1, now - 30)
    out = []
    for i, sample in enumerate(samples.values()):
        ts = int((base + i) * 1000)
        body = {"case_id": sample["case_id"], "input": sample.get("input"),
                "output": sample["output"], "timestamp": ts,
                "metadata": {"model": MODEL, "model_version": sample["version"]}}
        out.append((sample["case_id"].encode(), json.dumps(body).encode(), ts))
    return out


def choose(verdict: str | None, truth: str) -> str:
    """The reviewer's choice: agree when the judge's verdict is the truth."""
    if verdict is not None and (verdict == "UNSAFE") == (truth == "unsafe"):
        return "agree"
    return "disagree_unsafe" if truth == "unsafe" else "disagree_safe"


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="review-demo-"))
        self.broker: EmbeddedBroker | None = None
        self.judge: Child | None = None
        self.env: StreamEnv | None = None
        self.password = secrets.token_urlsafe(12)

    def say(self, text: str) -> None:
        say(self.started, text)

    # -- processes --------------------------------------------------------------

    def start_judge(self) -> dict[str, Any]:
        if self.args.judge == "rules":
            argv = [PY, "-m", "guardrail.local.rule_judge", "--port", "0"]
            self.judge = Child.spawn("rule judge", argv, log_path=self.tmp / "judge.log",
                                     stdout_pipe=True)
            api_base = self.judge.read_line(timeout=60)
            self.say(f"judge: the stand-in rule judge at {api_base} (trigger words, not a model)")
            return {"judge_model": "openai/rule-judge", "judge_api_base": api_base,
                    "judge_api_key": "demo", "judge_input_cost_per_token": 0.0,
                    "judge_output_cost_per_token": 0.0}
        self.judge = Child.spawn("local judge", guardrail_argv("judge", "serve", "--port", "0"),
                                 log_path=self.tmp / "judge.log", stdout_pipe=True)
        self.say("starting the local judge (guardrail judge serve) …")
        api_base = self.judge.read_line(timeout=600)
        self.say(f"judge: the bundled local model at {api_base}")
        return {"judge_model": "openai/local-judge", "judge_api_base": api_base,
                "judge_api_key": "local", "judge_input_cost_per_token": 0.0,
                "judge_output_cost_per_token": 0.0, "judge_timeout": 180,
                "judge_concurrency": 2, "judge_max_retries": 1}

    def start(self) -> Http:
        judge = self.start_judge()
        self.broker = EmbeddedBroker(log_path=self.tmp / "broker.log").start()
        self.say(f"embedded broker on {self.broker.bootstrap}")
        users = self.tmp / "reviewers.htpasswd"
        users.write_text(f"{REVIEWER}:"
                         + bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=5)).decode()
                         + "\n")
        tag = uuid.uuid4().hex[:8]
        self.env = StreamEnv(
            self.broker.bootstrap, judge["judge_api_base"], self.tmp,
            window_seconds=WINDOW_SECONDS, review_users_file=users,
            review_topic=f"review-{tag}", labels_topic=f"labels-{tag}",
            review_rate_unsafe=1.0, review_rate_safe=1.0,
            corrected_min_reviews=CORRECTED_MIN_REVIEWS,
            agreement_min_reviews=AGREEMENT_MIN_REVIEWS,
            **{k: v for k, v in judge.items() if k != "judge_api_base"})
        self.env.topics.update(review_topic=f"review-{tag}", labels_topic=f"labels-{tag}")
        made = self.env.cli("produce", "--input", "/dev/null")  # creates every topic
        if made.returncode != 0:
            raise RuntimeError(f"creating the topics failed: {made.stderr[-2000:]}")
        worker = self.env.start_worker()
        http = Http(worker.web_port, REVIEWER, self.password)
        deadline = time.monotonic() + 120
        while True:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode}):\n"
                                   + self.env.logs()[-3000:])
            try:
                if http.call("/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not answer /health in 120 s")
            time.sleep(0.5)
        self.say(f"worker up at {http.base}: review on, one reviewer; "
                 f"review_rate_unsafe = review_rate_safe = 1 (every result reviewed, every "
                 f"review weighs 1); corrected_min_reviews = {CORRECTED_MIN_REVIEWS}; "
                 f"agreement_min_reviews = {AGREEMENT_MIN_REVIEWS}; window {WINDOW_SECONDS} s")
        return http

    def stop(self) -> None:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C waits
        try:
            if self.judge is not None:  # first: calls in flight fail fast
                self.judge.stop(timeout=30)
            if self.env is not None:
                self.env.stop_workers()
            if self.broker is not None:
                self.broker.stop()
        finally:
            signal.signal(signal.SIGINT, previous)
        self.say(f"stopped everything started; logs in {self.tmp}")

    def alive(self) -> None:
        assert self.env is not None
        for proc in self.env.workers:
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({proc.returncode}):\n"
                                   + self.env.logs()[-3000:])
        if self.judge is not None:
            self.judge.check()

    # -- steps --------------------------------------------------------------------

    def read_topic(self, name: str, expect: int, timeout: float, what: str) -> list[dict]:
        """Read a topic until ``expect`` records, reporting progress, or fail."""
        assert self.env is not None
        deadline, shown, found = time.monotonic() + timeout, -1, []
        while time.monotonic() < deadline:
            self.alive()
            found = asyncio.run(consume(self.env.bootstrap, self.env.topic(name),
                                        expect=expect, timeout=10))
            if len(found) != shown:
                shown = len(found)
                self.say(f"{what}: {len(found)}/{expect}")
            if len(found) >= expect:
                return found
        raise RuntimeError(f"only {len(found)} of {expect} {what} in {timeout:.0f}s:\n"
                           + self.env.logs()[-3000:])

    def review(self, http: Http, samples: dict[str, dict[str, Any]], expect_items: int
               ) -> list[dict[str, Any]]:
        decisions: list[dict[str, Any]] = []
        items_done: set[str] = set()
        deadline = time.monotonic() + 120
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the review queue did not empty: {len(items_done)} of "
                                   f"{expect_items} items labelled")
            status, body = http.call("/review?format=json", auth=True)
            if status == 503:  # still reading its topics
                time.sleep(0.5)
                continue
            if status != 200:
                raise RuntimeError(f"GET /review answered {status}: {body}")
            item = body["item"]
            if item is None:
                if len(items_done) >= expect_items and body["left"] == 0:
                    return decisions
                time.sleep(0.5)  # the queue has not read every item yet
                continue
            case_id, version = item["case_id"], item["labels"].get("model_version")
            labels = []
            for metric in item["metrics"]:
                name = metric["name"]
                if name not in body["open_metrics"]:
                    continue
                truth = samples[case_id]["truth"][name]
                choice = choose(metric["verdict"], truth)
                labels.append({"metric": name, "choice": choice,
                               "note": f"scripted reviewer: truth label {truth}"})
                decisions.append({"case_id": case_id, "version": version, "metric": name,
                                  "judge_verdict": metric["verdict"],
                                  "judge_error": metric.get("error"),
                                  "probability_unsafe": metric.get("probability_unsafe"),
                                  "slice": metric["slice"], "rate": metric["rate"],
                                  "truth": truth, "choice": choice})
            status, answer = http.call("/review", {"case_id": case_id, "labels": labels},
                                       auth=True)
            if status != 200:
                raise RuntimeError(f"POST /review of {case_id} answered {status}: {answer}")
            items_done.add(case_id)

    def agreement(self, http: Http, expected: dict[tuple[str, str], int]) -> dict[str, Any]:
        """/agreement once every cell holds its labels and its observed rate."""
        deadline = time.monotonic() + 90
        body: Any = None
        while time.monotonic() < deadline:
            status, body = http.call("/agreement")
            if status == 200:
                rows = {(r["metric"], _version(r["group"])): r for r in body["agreement"]}
                if all(key in rows and rows[key]["reviewed"] == n
                       and rows[key]["observed_judged"] is not None
                       and "not computed yet" not in (rows[key]["corrected_note"] or "")
                       for key, n in expected.items()):
                    return body
            time.sleep(1)
        raise RuntimeError(f"/agreement never held every label: {body}")


def _version(group: str) -> str:
    return dict(part.split("=", 1) for part in group.split(","))["model_version"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _interval(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['value']:.1%} [{figure['low']:.1%}, {figure['high']:.1%}]"


def pooled(labels: list[dict[str, Any]], rates: list[dict[str, Any]], metric: str,
           window_start: str) -> dict[str, Any]:
    """Both versions together, with the product's functions: the confusion of
    the labels read back from the labels topic, the traffic of /rates."""
    records = [LabelRecord.model_validate(raw) for raw in labels if raw["metric"] == metric]
    confusion = Confusion.of(records)
    cells = [r for r in rates if r["metric"] == metric and r["window_start"] == window_start
             and _version(r["group"]) in VERSIONS]
    judged = sum(int(r["total"]) - int(r.get("errors", 0)) for r in cells)
    unsafe = sum(int(r["unsafe"]) for r in cells)
    corrected = corrected_rate(unsafe, judged, confusion, min_reviews=CORRECTED_MIN_REVIEWS)
    precision, recall = confusion.precision(), confusion.recall()
    return {"metric": metric, "group": "all versions (pooled by this script)",
            "reviewed": confusion.reviewed,
            "reviewed_verdicts": {"unsafe": confusion.unsafe_verdicts,
                                  "safe": confusion.safe_verdicts, "error": confusion.errors},
            "precision": None if precision is None else precision.as_dict(),
            "recall": None if recall is None else recall.as_dict(),
            "confusion": confusion.as_dict(), "observed_judged": judged,
            "observed_unsafe": unsafe,
            "observed_unsafe_rate": unsafe / judged if judged else None,
            "corrected_unsafe_rate": corrected.as_dict(), "corrected_note": corrected.note}


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [("| metric | version | reviewed (UNSAFE/SAFE verdicts) | precision [95%] | "
              "recall [95%] | observed unsafe | corrected unsafe [95%] | truth unsafe |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdicts = r["reviewed_verdicts"]
        errors = f", {verdicts['error']} errors" if verdicts.get("error") else ""
        corrected = (_interval(r["corrected_unsafe_rate"]) if r["corrected_unsafe_rate"]
                     else f"none: {r['corrected_note']}")
        observed = (f"{_pct(r['observed_unsafe_rate'])} ({r['observed_unsafe']}/"
                    f"{r['observed_judged']})" if r["observed_judged"] else "-")
        lines.append(f"| {r['metric']} | {r['version']} | {r['reviewed']} "
                     f"({verdicts['unsafe']}/{verdicts['safe']}{errors}) | "
                     f"{_interval(r['precision'])} | {_interval(r['recall'])} | {observed} | "
                     f"{corrected} | {r['truth_unsafe']} |")
    return lines


def screenshot(url: str, path: Path) -> None:
    from playwright.sync_api import sync_playwright

    path.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            # 1440 wide: at 1280 the panel's corrected-rate notes (which do not
            # wrap) push its table past the card's edge.
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url + "/dashboard?refresh=0")
            page.locator("section.agreement").wait_for()
            page.screenshot(path=str(path), full_page=True)
        finally:
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", choices=("rules", "local"), default="rules")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/review_demo.json")
    parser.add_argument("--screenshot", type=Path,
                        help="save /dashboard?refresh=0 here (headless Chromium)")
    args = parser.parse_args()

    samples = truth_table()
    info = meta()
    run = Run(args)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    previous_int = signal.signal(signal.SIGINT, _interrupt)
    code = 0
    try:
        http = run.start()
        assert run.env is not None
        now = time.time()
        asyncio.run(produce(run.env.bootstrap, run.env.topic("input"), records(samples, now)))
        run.say(f"produced {len(samples)} answers (model={MODEL}, model_version v1/v2)")
        judge_started = time.monotonic()
        timeout = 120 if args.judge == "rules" else 1800
        results = run.read_topic("results", len(samples), timeout, "results")
        judged_in = time.monotonic() - judge_started
        items = run.read_topic("review", len(samples), 120, "review items")
        run.say(f"{len(results)} results in {judged_in:.0f}s; {len(items)} review items")
        decisions = run.review(http, samples, len(samples))
        agree = sum(d["choice"] == "agree" for d in decisions)
        run.say(f"reviewed: {len(decisions)} labels on {len(samples)} items, {agree} agree, "
                f"{len(decisions) - agree} disagree")
        expected: dict[tuple[str, str], int] = {}
        for d in decisions:
            expected[(d["metric"], d["version"])] = expected.get((d["metric"], d["version"]),
                                                                 0) + 1
        agreement = run.agreement(http, expected)
        _, rates = http.call("/rates")
        labels = asyncio.run(consume(run.env.bootstrap, run.env.topic("labels"),
                                     expect=len(decisions), timeout=30))
        if args.screenshot:
            screenshot(http.base, args.screenshot)
            run.say(f"screenshot of /dashboard?refresh=0: {args.screenshot}")

        by_cell = {(r["metric"], _version(r["group"])): r for r in agreement["agreement"]}
        window_start = next(iter(by_cell.values()))["window_start"]
        rows = []
        for metric in METRICS:
            for version in VERSIONS:
                row = by_cell.get((metric, version))
                if row is None:
                    continue
                truths = [s["truth"][metric] for s in samples.values()
                          if s["version"] == version]
                rows.append({**row, "version": version,
                             "truth_unsafe": f"{truths.count('unsafe')}/{len(truths)}"})
            truths = [s["truth"][metric] for s in samples.values()]
            rows.append({**pooled(labels, rates["rates"], metric, window_start),
                         "version": "all", "truth_unsafe": f"{truths.count('unsafe')}/"
                                                           f"{len(truths)}"})
        lines = table(rows)
        print()
        print(f"judge: {args.judge} ({judged_in:.0f}s for {len(samples)} answers); every "
              f"result reviewed (review_rate_unsafe = review_rate_safe = 1: every review "
              f"weighs 1); corrected_min_reviews = {CORRECTED_MIN_REVIEWS} (a corrected rate "
              f"needs >= {CORRECTED_MIN_REVIEWS} reviews of each judge verdict); "
              f"agreement_min_reviews = {AGREEMENT_MIN_REVIEWS} (the dashboard's precision "
              f"and recall); one window from {window_start}; 'all' rows pooled by this script")
        print("\n".join(lines))
        wrong = [d for d in decisions if d["choice"] != "agree"]
        if wrong:
            print("\ndisagreements (judge vs truth):")
            for d in wrong:
                p = d["probability_unsafe"]
                print(f"  {d['case_id']:<14} {d['metric']:<9} judge "
                      f"{d['judge_verdict'] or 'error'}{'' if p is None else f' p={p:.2f}'}, "
                      f"truth {d['truth']}")
        payload = {**info, "judge": args.judge, "judge_seconds": round(judged_in, 1),
                   "settings": {"review_rate_unsafe": 1.0, "review_rate_safe": 1.0,
                                "corrected_min_reviews": CORRECTED_MIN_REVIEWS,
                                "window_seconds": WINDOW_SECONDS,
                                "agreement_min_reviews": AGREEMENT_MIN_REVIEWS},
                   "table": lines, "rows": rows, "decisions": decisions,
                   "agreement": agreement, "rates": rates}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2, default=str))
        run.say(f"wrote {args.out}")
    except KeyboardInterrupt:
        print("\ninterrupted: stopping everything started …", flush=True)
        code = 130
    except Exception as exc:  # noqa: BLE001 - one line, and still a clean stop
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        run.stop()
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)
    return code


if __name__ == "__main__":
    sys.exit(main())
