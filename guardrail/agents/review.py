"""The worker's review page, ``/review``: one item at a time for a signed-in
reviewer, labels written to the compacted labels topic.

    GUARDRAIL_REVIEW_USERS_FILE=reviewers.htpasswd guardrail worker
    open http://127.0.0.1:6066/review                    # sign-in form, then the queue
    curl -u ana:secret '127.0.0.1:6066/review?format=json'   # the item ana now holds
    curl -u ana:secret -H 'Content-Type: application/json' 127.0.0.1:6066/review \\
         -d '{"case_id": "c-1", "labels": [{"metric": "toxicity", "choice": "agree"}]}'
    curl -u ana:secret -H 'Content-Type: application/json' 127.0.0.1:6066/review \
         -d '{"case_id": "c-2", "gate": "release"}'      # gate mode: a held record

Routes: ``GET /review`` (the held item; ``?format=json`` for scripts),
``POST /review`` (labels: the page's form with its CSRF token, or JSON with
basic auth), ``GET``/``POST /review/login`` (the sign-in form),
``POST /review/logout``. Without ``review_users_file`` each answers 404 with
one line saying how to turn review on. Auth and CSRF:
:mod:`guardrail.review.access`; the queue and its leases (in this process's
memory): :mod:`guardrail.review.queue`.

The page answers from memory: two topic followers fold the review topic and
the labels topic; until both have read to the end it says it is loading (so
nothing already labelled is offered again). A label is acknowledged by the
broker before the page says it is saved; then it is applied here at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web
from faust.web import View

from ..errors import ConfigError
from ..kafka.changelog import TopicFollower
from ..review.access import (LOGIN_COOKIE, SESSION_COOKIE, Gate, Identity, Refused, safe_next,
                             wants_html)
from ..review.auth import Users
from ..review.page import (SECURITY_HEADERS, Viewer, render_empty, render_item, render_login,
                           render_message)
from ..review.queue import Conflict, ReviewQueue
from ..review.records import GateAnswer, LabelRecord
from ..review.submit import Answer, Invalid, parse_form, parse_json

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "ReviewService", "OFF_MESSAGE", "SEND_TIMEOUT_SECONDS"]

log = logging.getLogger("guardrail.review")

OFF_MESSAGE = ("review is off: set GUARDRAIL_REVIEW_USERS_FILE to a file of name:bcrypt-hash "
               "lines (htpasswd -B) to turn it on")
#: Longest wait for the broker to acknowledge a reviewer's labels.
SEND_TIMEOUT_SECONDS = 15.0
PATHS = ("/review", "/review/login", "/review/logout")


class ReviewService:
    """The queue, the followers feeding it, and the labels topic's sender."""

    def __init__(self, runtime: WorkerRuntime, users: Users) -> None:
        settings = runtime.settings
        review = settings.review
        self.queue = ReviewQueue(lease_seconds=review.review_lease_seconds)
        self.gate = Gate(users)
        wait = settings.worker.consumer_fetch_wait_ms
        self.followers = tuple(
            TopicFollower(settings.kafka, topic, sink, fetch_wait_ms=wait)
            for topic, sink in ((review.review_topic, self.queue.items),
                                (review.labels_topic, self.queue.labels)))
        self._labels_topic = runtime.app.topic(review.labels_topic, key_type=bytes,
                                               value_type=bytes, key_serializer="raw",
                                               value_serializer="raw")

    async def start(self) -> None:
        for follower in self.followers:
            await follower.start()

    async def stop(self) -> None:
        for follower in self.followers:
            await follower.stop()

    def loading(self) -> str | None:
        """Why the queue cannot be shown yet (a topic not read to its end), or None."""
        behind = [f.topic for f in self.followers if not f.caught_up]
        return f"still reading {', '.join(behind)}" if behind else None

    async def send(self, labels: list[LabelRecord | GateAnswer]) -> None:
        """Write the labels and wait until the broker acknowledged every one."""
        futures = [await self._labels_topic.send(key=label.key(), value=label.encode())
                   for label in labels]
        if not futures:
            return
        # asyncio.wait, not wait_for: a timeout must not cancel the producer's futures.
        done, pending = await asyncio.wait(futures, timeout=SEND_TIMEOUT_SECONDS)
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(futures)} labels not acknowledged "
                               f"within {SEND_TIMEOUT_SECONDS:.0f}s")
        for future in done:
            future.result()  # the send's error, if it failed


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html",
                        headers=SECURITY_HEADERS)


def _refusal(request: web.Request, status: int, message: str, who: Identity | None = None,
             gate: Gate | None = None) -> web.Response:
    """An error in the shape the caller reads: a page for a browser, else JSON."""
    if wants_html(request):
        viewer = Viewer(who.name, gate.csrf(who), who.via) if who and gate else None
        titles = {401: "Not signed in", 403: "Refused", 409: "Not saved", 503: "Not saved"}
        return _html(render_message(titles.get(status, "Not saved"), message, viewer=viewer),
                     status)
    headers = {"WWW-Authenticate": 'Basic realm="guardrail review"'} if status == 401 else {}
    return web.json_response({"error": message}, status=status, headers=headers)


def _flash(query: Any) -> str | None:
    """What the last post did (the redirect after it carries the counts)."""
    saved, skipped = (int(v) if v.isdigit() else 0
                      for v in (query.get("saved", ""), query.get("skipped", "")))

    def plural(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    if saved and skipped:
        return f"Saved {plural(saved, 'label')}; skipped {plural(skipped, 'metric')}."
    if saved:
        return f"Saved {plural(saved, 'label')}."
    if skipped:
        return "Skipped: nothing saved, and you will not be shown that item again."
    return None


async def _show(service: ReviewService, request: web.Request) -> web.StreamResponse:
    gate, queue = service.gate, service.queue
    try:
        who = await gate.identify(request)
    except Refused as exc:
        return _refusal(request, exc.status, exc.message)
    if who is None:
        return gate.unauthenticated(request, "sign in to review (HTTP basic auth or "
                                              "/review/login)")
    if gate.cross_site_fetch(request):
        return _refusal(request, 403, "refused: open the review page directly")
    as_json = request.query.get("format") == "json"
    viewer = Viewer(who.name, gate.csrf(who), who.via)
    loading = service.loading()
    if loading:
        if as_json:
            return web.json_response({"error": f"loading: {loading}"}, status=503)
        return _html(render_empty(viewer, None, loading=loading), 503)
    offer = queue.next_for(who.name)
    remaining = queue.remaining(who.name)
    if as_json:
        return web.json_response({
            "reviewer": who.name, "left": remaining.left,
            "held_by_others": remaining.held_by_others,
            "item": offer.item.model_dump(mode="json") if offer else None,
            "open_metrics": [m.name for m in offer.metrics] if offer else [],
            "gate_open": offer.gate_open if offer else False},
            headers={"Cache-Control": "no-store"})
    flash = _flash(request.query)
    if offer is None:
        return _html(render_empty(viewer, remaining, flash=flash))
    return _html(render_item(offer, viewer, remaining, flash=flash))


async def _read_answer(gate: Gate, request: web.Request, who: Identity) -> tuple[Answer, bool]:
    """The answer posted, and whether it came as JSON; Refused / Invalid otherwise."""
    if request.content_type == "application/json":
        gate.check_json_post(request, who)
        try:
            body = await request.json()
        except ValueError:
            raise Invalid("the body is not JSON") from None
        return parse_json(body), True
    form = await request.post()
    gate.check_form_post(request, who, form)
    return parse_form(form), False


async def _label(service: ReviewService, request: web.Request) -> web.StreamResponse:
    gate, queue = service.gate, service.queue
    try:
        who = await gate.identify(request)
        if who is None:
            raise Refused(401, "sign in to review: nothing was saved")
        answer, as_json = await _read_answer(gate, request, who)
    except Refused as exc:
        return _refusal(request, exc.status, exc.message)
    except Invalid as exc:
        return _refusal(request, exc.status, str(exc), who, gate)
    if (loading := service.loading()) is not None:
        return _refusal(request, 503, f"the queue is loading ({loading}); nothing was saved",
                        who, gate)
    try:
        offer = queue.begin_write(who.name, answer.case_id)
    except Conflict as exc:
        return _refusal(request, 409, str(exc), who, gate)
    try:
        labels, skipped = answer.decide(offer.item, offer.metrics, reviewer=who.name,
                                        gate_open=offer.gate_open)
        await service.send(labels)
    except Invalid as exc:
        queue.abort_write(answer.case_id)
        if as_json:
            return web.json_response({"error": str(exc)}, status=exc.status)
        viewer = Viewer(who.name, gate.csrf(who), who.via)
        return _html(render_item(offer, viewer, queue.remaining(who.name), error=str(exc)),
                     exc.status)
    except Exception as exc:  # not acknowledged (all of them): the item stays open, held.
        # A label that did get through is written again, same key, if they resubmit.
        queue.abort_write(answer.case_id)
        log.warning("review: labels of %s by %s not acknowledged: %s", answer.case_id,
                    who.name, exc)
        return _refusal(request, 503, "not saved: the labels topic did not acknowledge in "
                        f"time ({type(exc).__name__}); try again", who, gate)
    queue.finish_write(who.name, answer.case_id, labels, skipped=bool(skipped))
    if as_json:
        gate = next((a.answer for a in labels if isinstance(a, GateAnswer)), None)
        return web.json_response({"saved": [a.metric for a in labels
                                            if isinstance(a, LabelRecord)],
                                  "gate": gate, "skipped": skipped})
    return web.Response(status=303, headers={
        "Location": f"/review?saved={len(labels)}&skipped={len(skipped)}"})


async def _login_form(service: ReviewService, request: web.Request) -> web.StreamResponse:
    gate = service.gate
    next_path = safe_next(request.query.get("next"))
    if gate.tokens.open_session(request.cookies.get(SESSION_COOKIE), gate.users):
        return web.Response(status=303, headers={"Location": next_path})
    nonce = request.cookies.get(LOGIN_COOKIE) or gate.tokens.login_nonce()
    response = _html(render_login(gate.tokens.login_token(nonce), next_path=next_path))
    response.set_cookie(LOGIN_COOKIE, nonce, path="/review/login", max_age=3600,
                        httponly=True, samesite="Strict", secure=request.secure)
    return response


async def _login(service: ReviewService, request: web.Request) -> web.StreamResponse:
    gate = service.gate
    form = await request.post()
    next_path = safe_next(form.get("next"))
    nonce = request.cookies.get(LOGIN_COOKIE)
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none") \
            or not gate.tokens.check_login(nonce, form.get("csrf")):
        return _html(render_message("Refused", "the sign-in form was not served to this "
                                    "browser (or cookies are off); open /review/login again. "
                                    "Scripts: use HTTP basic auth."), 403)
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    if not name or not await gate.users.verify(name, password):
        assert nonce is not None
        page = render_login(gate.tokens.login_token(nonce), next_path=next_path,
                            error="wrong name or password", name=name)
        return _html(page, 401)
    log.info("review: %s signed in", name)
    response = web.Response(status=303, headers={"Location": next_path})
    gate.set_session(request, response, name)
    response.del_cookie(LOGIN_COOKIE, path="/review/login")
    return response


async def _logout(service: ReviewService, request: web.Request) -> web.StreamResponse:
    gate = service.gate
    try:
        who = await gate.identify(request)
        if who is None:
            raise Refused(401, "not signed in")
        gate.check_form_post(request, who, await request.post())
    except Refused as exc:
        return _refusal(request, exc.status, exc.message)
    service.queue.release(who.name)  # what they held goes back to the others at once
    response = web.Response(status=303, headers={"Location": "/review/login"})
    if who.session is not None:
        gate.tokens.revoke(who.session)
        gate.clear_session(response)
    return response


def _register_off(app: Any) -> None:
    for path in PATHS:
        @app.page(path, name=f"review-off{path}")
        class ReviewOff(View):
            async def get(self, request: Any) -> Any:
                return self.text(OFF_MESSAGE + "\n", status=404)

            async def post(self, request: Any) -> Any:
                return self.text(OFF_MESSAGE + "\n", status=404)


def register(runtime: WorkerRuntime) -> ReviewService | None:
    """Add the review pages (or their 404s when review is off); with
    ``review_protect_pages``, put the other pages behind the same credentials."""
    app, review = runtime.app, runtime.settings.review
    if review.review_users_file is None:
        if review.review_protect_pages:
            raise ConfigError("review_protect_pages needs review_users_file (the reviewers "
                              "who may see the pages); set GUARDRAIL_REVIEW_USERS_FILE")
        _register_off(app)
        return None
    service = ReviewService(runtime, Users.load(review.review_users_file))
    runtime.services.append(service)
    if review.review_protect_pages:
        app.web.web_app.middlewares.append(service.gate.protect_pages())
    handlers = {"/review": (_show, _label), "/review/login": (_login_form, _login),
                "/review/logout": (None, _logout)}
    for path, (on_get, on_post) in handlers.items():
        _route(app, path, service, on_get, on_post)
    return service


def _route(app: Any, path: str, service: ReviewService, on_get: Any, on_post: Any) -> None:
    @app.page(path, name=f"review{path}")
    class Review(View):
        async def get(self, request: Any) -> Any:
            if on_get is None:
                return web.Response(status=405, text="POST only\n", headers={"Allow": "POST"})
            return await on_get(service, request)

        async def post(self, request: Any) -> Any:
            return await on_post(service, request)
