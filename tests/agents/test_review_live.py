"""/review in a real headless browser against a real worker on the embedded broker.

A worker with a users file of three reviewers judges a support bot's rude
answers with the stand-in rule judge (UNSAFE on "idiot", "stupid", …; every
UNSAFE verdict goes to review, no SAFE one, so each item has one metric).
The first item is hostile: markup, an ``onerror`` attribute the judge quotes
as evidence, bidi overrides and 100 KB of text. Then Chromium (the Debian
package, driven by Playwright) signs reviewers in and labels, and the labels
topic is read back.

The tests share one queue and run in file order, but none relies on another
having run: each reviewer only ever sees what is left. Skipped, saying why,
without Playwright or Chromium (as tests/agents/test_dashboard_live.py).
``GUARDRAIL_REVIEW_SCREENSHOT=docs/img/review.png`` also saves a screenshot of
the page (how docs/img/review.png is made).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import bcrypt
import pytest
from support.harness import StreamEnv, consume, produce

from guardrail.demo.runner import load_samples

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PASSWORDS = {"ana": "ana-pass-1", "bob": "bob-pass-2", "cid": "cid-pass-3"}
EVIL_IMG = '"><img src=x onerror="alert(\'xss-img\')">'
HOSTILE = ("<script>alert('xss-script')</script> you idiot " + EVIL_IMG
           + " \u202eevil reversed text\u202c then \u2067isolated\u2069 and a zero\u200bwidth; "
           + "lorem ipsum dolor sit amet, " * 3700)


def _users_file(path) -> None:
    lines = []
    for i, (name, password) in enumerate(PASSWORDS.items()):
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
        lines.append(f"{name}:{'$2y$' + hashed[4:] if i % 2 == 0 else hashed}")  # htpasswd -B
    path.write_text("\n".join(lines) + "\n")


def _rude_messages() -> list[tuple]:
    rude = [s for s in load_samples() if s["version"] == "v2" and s["case_id"] != "v2-password"]
    now = int(time.time() * 1000)
    return [(f"{s['case_id']}-{n}".encode(),
             json.dumps({"case_id": f"{s['case_id']}-{n}", "input": "A customer question.",
                         "output": s["output"],
                         "metadata": {"model": "support-bot", "model_version": "v2"}}).encode(),
             now) for n in range(2) for s in rude]


@pytest.fixture(scope="module")
def live(kafka_bootstrap, thread_judge, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("review")
    _users_file(tmp / "reviewers.htpasswd")
    thread_judge.reset()
    # The judge quotes the attribute injection as evidence: it must be marked, as text.
    thread_judge.triggers["toxicity"] = thread_judge.triggers["toxicity"] | {'"><img'}
    tag = tmp.name[-6:].replace("_", "")
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp, topic_partitions=1,
                    review_users_file=tmp / "reviewers.htpasswd", review_topic=f"rev-{tag}",
                    labels_topic=f"lab-{tag}", review_rate_safe=0, review_band=0)
    env.topics.update(review_topic=f"rev-{tag}", labels_topic=f"lab-{tag}")
    try:
        hostile = [(b"hostile", json.dumps({"case_id": "hostile", "output": HOSTILE}).encode(),
                    int(time.time() * 1000))]
        rude = _rude_messages()
        assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates topics
        asyncio.run(produce(env.bootstrap, env.topic("input"), hostile))
        worker = env.start_worker()
        # The hostile item first: one partition, so it heads the review queue.
        asyncio.run(consume(env.bootstrap, env.topic("review"), expect=1, timeout=90))
        asyncio.run(produce(env.bootstrap, env.topic("input"), rude))
        items = asyncio.run(consume(env.bootstrap, env.topic("review"), expect=1 + len(rude),
                                    timeout=90))
        assert len(items) == 1 + len(rude), env.logs()[-3000:]
        yield SimpleNamespace(env=env, url=f"http://127.0.0.1:{worker.web_port}", items=items)
    finally:
        env.stop_workers()


def _sign_in(browser, url: str, name: str):
    """A fresh browser context, signed in with the form; returns its page on /review."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(url + "/review")
    expect(page).to_have_url(url + "/review/login?next=/review")
    page.fill("#name", name)
    page.fill("#password", PASSWORDS[name])
    page.click("form button[type=submit]")
    expect(page).to_have_url(url + "/review")
    _wait_loaded(page)
    return page


def _wait_loaded(page) -> None:
    """The queue is read from Kafka when the worker starts: the page waits a moment."""
    deadline = time.monotonic() + 30
    while "loading" in page.title() and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        page.reload()
    assert "loading" not in page.title()


def _access_key(page, key: str) -> None:
    """Alt+key as a keyboard sends it (keydown with its text, as CDP takes it):
    Playwright's own Alt+key leaves the text out, which access keys need."""
    cdp = page.context.new_cdp_session(page)
    code = f"Digit{key}" if key.isdigit() else f"Key{key.upper()}"
    event = {"modifiers": 1, "key": key, "code": code, "text": key, "unmodifiedText": key,
             "windowsVirtualKeyCode": ord(key.upper())}
    cdp.send("Input.dispatchKeyEvent", {"type": "keyDown", **event})
    cdp.send("Input.dispatchKeyEvent", {"type": "keyUp", **event})
    cdp.detach()


def _case(page) -> str:
    return page.locator("input[name=case_id]").input_value()


def _in_thread(coroutine):
    """Run a coroutine to its end in a thread of its own: Playwright's sync API
    keeps an event loop running in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _labels(live, expect: int, settle: float = 2.0) -> list[dict]:
    return _in_thread(consume(live.env.bootstrap, live.env.topic("labels"), expect=expect,
                               timeout=30, settle=settle))


def _post(url: str, data: bytes, headers: dict) -> int:
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


def test_a_hostile_text_is_shown_as_text_and_runs_nothing(live, browser):
    from playwright.sync_api import expect

    page = _sign_in(browser, live.url, "cid")
    dialogs, messages = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("console", lambda message: messages.append(message.text))
    page.reload()
    assert _case(page) == "hostile"
    box = page.locator('.field[data-field="output"] .judged')
    text = box.text_content()
    assert "<script>alert('xss-script')</script> you idiot" in text
    assert EVIL_IMG in text and len(text) > 100_000
    assert page.evaluate("document.querySelectorAll('img, script').length") == 0
    marks = box.locator("mark")
    # In place, as text (the judge's answer parsing trims the quote off the span).
    assert marks.all_text_contents()[:2] == ["idiot", "><img"]
    # The overrides are shown, not obeyed: the text after them reads left to right.
    controls = box.locator(".ctl")
    assert controls.all_text_contents()[:4] == ["RLO", "PDF", "RLI", "PDI"]
    assert "RLOevil reversed textPDF" in text
    # Still usable: the text scrolls in its box, the choices stay on screen.
    assert page.evaluate("(e) => e.scrollHeight > 3 * e.clientHeight", box.element_handle())
    save = page.locator("button[value=save]")
    expect(save).to_be_in_viewport()
    if os.environ.get("GUARDRAIL_REVIEW_HOSTILE_SCREENSHOT"):  # to look at, not for the docs
        page.screenshot(path=os.environ["GUARDRAIL_REVIEW_HOSTILE_SCREENSHOT"])
    page.wait_for_timeout(300)
    assert dialogs == [] and not [m for m in messages if "xss" in m]
    # cid skips it (nothing written); it stays open for the others.
    _access_key(page, "9")
    expect(page.locator(".flash")).to_contain_text("Skipped: nothing saved")
    assert _case(page) != "hostile"
    page.context.close()


def test_reviewers_label_with_keyboard_and_clicks_and_never_share_an_item(live, browser):
    from playwright.sync_api import expect

    ana = _sign_in(browser, live.url, "ana")
    bob = _sign_in(browser, live.url, "bob")
    held = _case(ana)
    assert held == "hostile" and _case(bob) != held
    expect(bob.locator("#remaining")).to_contain_text("held by other reviewers")
    done: dict[str, tuple[str, str | None]] = {}

    def saved(choice: str, note: str | None = None) -> None:
        expect(ana.locator(".flash")).to_have_text("Saved 1 label.")
        done[held] = (choice, note)
        assert _case(bob) not in done  # bob's item is still bob's
        bob.reload()
        assert _case(bob) not in done and _case(bob) != _case(ana)

    # 1: clicks.
    ana.click("label:has(input[name=c0][value=agree])")
    ana.click("button[value=save]")
    saved("agree")
    # 2: keyboard only: Alt+1 agree, Alt+0 save.
    held = _case(ana)
    if os.environ.get("GUARDRAIL_REVIEW_SCREENSHOT"):
        ana.screenshot(path=os.environ["GUARDRAIL_REVIEW_SCREENSHOT"])
    _access_key(ana, "1")
    expect(ana.locator("input[name=c0][value=agree]")).to_be_checked()
    _access_key(ana, "0")
    saved("agree")
    # 3: keyboard: Alt+2 disagree-it-is-safe, a note, Enter saves.
    held = _case(ana)
    _access_key(ana, "2")
    ana.locator("input[name=n0]").focus()
    ana.keyboard.type("quoting the customer")
    ana.keyboard.press("Enter")
    saved("disagree_safe", "quoting the customer")
    # 4: skip the whole item: nothing written, never shown to ana again.
    skipped = _case(ana)
    _access_key(ana, "9")
    expect(ana.locator(".flash")).to_contain_text("Skipped: nothing saved")
    # 5 and 6: clicks, and saving without a choice is held back by the form.
    for choice in ("disagree_safe", "agree"):
        held = _case(ana)
        assert held != skipped
        assert not ana.evaluate("document.querySelector('form.labels').checkValidity()")
        ana.click("button[value=save]")  # nothing chosen: the browser does not send it
        ana.wait_for_timeout(200)
        assert _case(ana) == held and ana.locator(".error").count() == 0
        ana.click(f"label:has(input[name=c0][value={choice}])")
        ana.click("button[value=save]")
        saved(choice)
    assert len(done) == 5 and _case(ana) not in done.keys() | {skipped}

    labels = _labels(live, expect=5)
    mine = [label for label in labels if label["reviewer"] == "ana"]
    assert len(mine) == 5, labels
    assert not [label for label in labels if label["reviewer"] == "bob"]
    assert {label["case_id"]: (label["choice"], label["note"]) for label in mine} == done
    for label in mine:
        assert label["judge_verdict"] == "UNSAFE" and label["judge_model"] == "openai/test-judge"
        assert label["label"] == ("unsafe" if label["choice"] == "agree" else "safe")
        assert label["rubric_version"] and label["labelled_at"]
    # Labelled items are gone for everyone: bob keeps his, then gets fresh ones.
    bob.reload()
    assert _case(bob) not in done
    ana.context.close()
    bob.context.close()


def test_unauthenticated_forged_and_cross_site_writes_are_refused(live, browser):
    from playwright.sync_api import expect

    before = len(_labels(live, expect=0, settle=1.5))
    probe = urllib.request.Request(live.url + "/review?format=json",
                                   headers={"Authorization": _basic("cid", PASSWORDS["cid"])})
    with urllib.request.urlopen(probe, timeout=10) as response:
        item = json.loads(response.read())["item"]
    case_id, metric = item["case_id"], item["metrics"][0]["name"]
    form = f"case_id={case_id}&m0={metric}&c0=agree&action=save"
    url, as_form = live.url + "/review", {"Content-Type": "application/x-www-form-urlencoded"}
    cid = {**as_form, "Authorization": _basic("cid", PASSWORDS["cid"])}
    assert _post(url, form.encode(), as_form) == 401
    assert _post(url, form.encode(), {**as_form, "Authorization": _basic("cid", "guess")}) == 401
    assert _post(url, form.encode(), {**as_form, "Authorization": _basic("eve", "x")}) == 401
    assert _post(url, form.encode(), cid) == 403  # no CSRF token
    assert _post(url, f"{form}&csrf=9999999999.00.forged".encode(), cid) == 403
    page = _sign_in(browser, live.url, "ana")
    token = page.locator("input[name=csrf]").first.input_value()
    assert _post(url, f"{form}&csrf={token}".encode(), cid) == 403  # ana's, not cid's
    # ana's own cookie and token, but posted from another site.
    response = page.context.request.post(url, form={"case_id": _case(page), "m0": metric,
                                                    "c0": "agree", "csrf": token},
                                         headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status == 403
    # A session cookie alone may not write JSON (only basic auth may, for scripts).
    body = json.dumps({"case_id": _case(page), "labels": [{"metric": metric,
                                                           "choice": "agree"}]})
    response = page.context.request.post(url, data=body,
                                         headers={"Content-Type": "application/json"})
    assert response.status == 403
    assert _post(url, body.encode(), {"Content-Type": "application/json"}) == 401
    page.context.close()
    # A wrong password on the sign-in form.
    page = browser.new_page()
    page.goto(live.url + "/review/login")
    page.fill("#name", "ana")
    page.fill("#password", "not-her-password")
    with page.expect_response(lambda r: r.url.endswith("/review/login")) as answer:
        page.click("form button[type=submit]")
    assert answer.value.status == 401
    expect(page.locator(".error")).to_have_text("wrong name or password")
    page.close()
    assert len(_labels(live, expect=before, settle=2.0)) == before  # nothing was written
    # The script's way works: basic auth and JSON, no token.
    body = json.dumps({"case_id": case_id, "labels": [{"metric": metric, "choice": "agree"}]})
    assert _post(url, body.encode(), {"Content-Type": "application/json",
                                      "Authorization": _basic("cid", PASSWORDS["cid"])}) == 200
    after = _labels(live, expect=before + 1)
    assert len(after) == before + 1 and after[-1]["reviewer"] == "cid"
    assert after[-1]["case_id"] == case_id
