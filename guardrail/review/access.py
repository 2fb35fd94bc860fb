"""Who is asking, over HTTP, and whether a write may go through (aiohttp requests)::

    gate = Gate(Users.load(path))
    who = await gate.identify(request)   # Identity, None (no credentials), or Refused(401)
    gate.check_form_post(request, who, form)   # Refused(403): cross-site, no/forged token
    gate.check_json_post(request, who)         # Refused(403) unless basic auth + JSON
    middleware = gate.protect_pages()          # review_protect_pages: the other pages too

**Credentials.** HTTP basic auth is always accepted (scripts, Prometheus'
``basic_auth``); a wrong basic password is refused (401), never retried with
the cookie. Browsers may sign in with the form instead and get a session
cookie (HttpOnly, SameSite=Strict, Path=/; Secure over HTTPS).

**CSRF.** Browsers re-send cached basic credentials on cross-site requests,
so basic auth alone does not show that a form post is wanted: *every* form
post (url-encoded, multipart or text/plain, whatever the credentials) must
carry a token signed for that user and session (:class:`~.auth.Tokens`). A
post a browser marks cross-site (``Sec-Fetch-Site``) is refused before that.
A post without a token is accepted only as ``Content-Type: application/json``
with basic auth: a page on another site cannot send that content type
without a CORS preflight, and this server answers none (no CORS headers), so
such a request comes from a script holding the password. The sign-in form
has a token too, bound to a cookie set when the form was served, so another
site cannot sign a browser in under its own account.

**Read-only pages.** With ``review_protect_pages`` every page but ``/health``
(load balancer and container probes have no credentials) needs the same
credentials; a browser without them is sent to the sign-in form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from .auth import Session, Tokens, Users, parse_basic

__all__ = ["Gate", "Identity", "Refused", "SESSION_COOKIE", "LOGIN_COOKIE", "OPEN_PATHS",
           "safe_next", "wants_html"]

SESSION_COOKIE = "guardrail_review"
LOGIN_COOKIE = "guardrail_review_login"
#: Open with review_protect_pages too: probes carry no credentials.
OPEN_PATHS = ("/health",)
REALM = 'Basic realm="guardrail review", charset="UTF-8"'


class Refused(Exception):
    """A request refused: ``status`` (401 or 403) and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Identity:
    """A reviewer, how they proved it, and what their CSRF tokens are bound to."""

    name: str
    via: str  # "basic" or "session"
    session: Session | None = None

    @property
    def binding(self) -> str:
        return self.session.nonce if self.session is not None else "basic"


def wants_html(request: web.Request) -> bool:
    """A browser navigating (it asks for HTML), not a script."""
    return "text/html" in request.headers.get("Accept", "")


def safe_next(value: Any) -> str:
    """A local path to return to after sign-in; anything else (another site,
    ``//host``, a backslash trick, a file upload) goes to ``/review``."""
    if (not isinstance(value, str) or not value.startswith("/") or value.startswith("//")
            or "\\" in value or any(ord(c) < 0x20 for c in value)):
        return "/review"
    return value


def _cross_site(request: web.Request) -> bool:
    return request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none")


class Gate:
    """Identifies requests and guards writes (see the module doc)."""

    def __init__(self, users: Users, tokens: Tokens | None = None) -> None:
        self.users = users
        self.tokens = tokens or Tokens()

    async def identify(self, request: web.Request) -> Identity | None:
        """The reviewer behind the request; None without credentials;
        :class:`Refused` (401) for a wrong basic auth name or password."""
        header = request.headers.get("Authorization")
        if header:
            credentials = parse_basic(header)
            if credentials is None or not await self.users.verify(*credentials):
                raise Refused(401, "wrong name or password")
            return Identity(credentials[0], "basic")
        session = self.tokens.open_session(request.cookies.get(SESSION_COOKIE), self.users)
        return None if session is None else Identity(session.name, "session", session)

    def csrf(self, who: Identity) -> str:
        return self.tokens.csrf(who.name, who.binding)

    def check_form_post(self, request: web.Request, who: Identity, form: Any) -> None:
        """A form post: same-site, with this reviewer's token (403 otherwise)."""
        if _cross_site(request):
            raise Refused(403, "refused: the form was posted from another site")
        token = form.get("csrf")
        if not isinstance(token, str) or not token:
            raise Refused(403, "refused: the form carries no CSRF token; reload the page")
        if not self.tokens.check_csrf(token, who.name, who.binding):
            raise Refused(403, "refused: the form's CSRF token is not valid for you (expired, "
                               "or from another session); reload the page")

    def check_json_post(self, request: web.Request, who: Identity) -> None:
        """A script's JSON post: basic auth, never a cookie alone (403 otherwise)."""
        if _cross_site(request):
            raise Refused(403, "refused: posted from another site")
        if who.via != "basic":
            raise Refused(403, "refused: JSON writes need HTTP basic auth (the page's form "
                               "carries a CSRF token instead)")

    def cross_site_fetch(self, request: web.Request) -> bool:
        """An image, script or frame load from another site (not a navigation): a
        GET of the review page from one must not hold an item for the reviewer."""
        return _cross_site(request) and request.headers.get("Sec-Fetch-Mode") != "navigate"

    def set_session(self, request: web.Request, response: web.StreamResponse,
                    name: str) -> None:
        stamp = self.users.stamp(name)
        assert stamp is not None  # just verified
        response.set_cookie(SESSION_COOKIE, self.tokens.session(name, stamp), path="/",
                            max_age=self.tokens.session_seconds, httponly=True,
                            samesite="Strict", secure=request.secure)

    @staticmethod
    def clear_session(response: web.StreamResponse) -> None:
        response.del_cookie(SESSION_COOKIE, path="/")

    def unauthenticated(self, request: web.Request, message: str = "sign in to see this page"
                        ) -> web.StreamResponse:
        """401 asking for basic auth; a browser navigating goes to the sign-in form."""
        if request.method in ("GET", "HEAD") and wants_html(request):
            target = quote(request.path_qs, safe="/")
            return web.Response(status=303, headers={"Location": f"/review/login?next={target}"})
        return web.Response(status=401, text=f"{message}\n", headers={"WWW-Authenticate": REALM})

    def protect_pages(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """aiohttp middleware: every page but :data:`OPEN_PATHS` and the review
        pages (which check for themselves) needs a reviewer's credentials."""

        @web.middleware
        async def protect(request: web.Request, handler: Any) -> web.StreamResponse:
            path = request.path
            if path in OPEN_PATHS or path == "/review" or path.startswith("/review/"):
                return await handler(request)
            try:
                who = await self.identify(request)
            except Refused as exc:
                return web.Response(status=exc.status, text=f"{exc.message}\n",
                                    headers={"WWW-Authenticate": REALM})
            if who is None:
                return self.unauthenticated(request)
            return await handler(request)

        return protect
