"""The review routes and page protection on the worker's real web app
(Faust's aiohttp app as ``build_app`` makes it), without Kafka: the app is
built, not started, so the review queue reports that it is still loading."""

from __future__ import annotations

import base64

import bcrypt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from guardrail.agents.app import build_app
from guardrail.agents.review import OFF_MESSAGE
from guardrail.errors import ConfigError
from guardrail.config.settings import load_settings

HTML = {"Accept": "text/html,application/xhtml+xml"}


def _settings(**overrides):
    return load_settings(environ={}, judge_model="openai/test-judge",
                         judge_api_base="http://127.0.0.1:9", judge_api_key="sk-test",
                         **overrides)


def _forged(token: str) -> str:
    """The token with its first character changed (never to itself)."""
    return ("y" if token[0] == "x" else "x") + token[1:]


def _basic(name: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"ana:{bcrypt.hashpw(b'pw', bcrypt.gensalt(rounds=4)).decode()}\n")
    return path


@pytest.fixture
async def client_for():
    made = []

    async def build(settings):
        runtime = build_app(settings)
        runtime.app.web.init_server()
        client = TestClient(TestServer(runtime.app.web.web_app))
        await client.start_server()
        made.append((runtime, client))
        return client

    yield build
    for runtime, client in made:
        await client.close()
        await runtime.message_judge.evaluator.aclose()


async def test_without_a_users_file_review_is_404_with_one_line(client_for):
    client = await client_for(_settings())
    for method, path in (("GET", "/review"), ("POST", "/review"), ("GET", "/review/login"),
                         ("POST", "/review/logout")):
        response = await client.request(method, path)
        assert response.status == 404
        assert await response.text() == OFF_MESSAGE + "\n"
    assert "GUARDRAIL_REVIEW_USERS_FILE" in OFF_MESSAGE and "htpasswd -B" in OFF_MESSAGE
    assert (await client.get("/dashboard?refresh=0")).status == 200  # read-only pages as today


def test_protecting_pages_needs_a_users_file():
    with pytest.raises(ConfigError, match="review_protect_pages needs review_users_file"):
        build_app(_settings(review_protect_pages=True))


def test_a_broken_users_file_stops_the_start(tmp_path):
    path = tmp_path / "users"
    path.write_text("ana:$apr1$salt$0123456789abcdefghijkl\n")
    with pytest.raises(ConfigError, match=f"{path} line 1: the password of 'ana' is not a "
                                          "bcrypt hash"):
        build_app(_settings(review_users_file=path))


async def test_review_needs_credentials_and_sends_browsers_to_sign_in(client_for, users_file):
    client = await client_for(_settings(review_users_file=users_file))
    response = await client.get("/review", allow_redirects=False)
    assert response.status == 401 and response.headers["WWW-Authenticate"].startswith("Basic")
    response = await client.get("/review", headers=HTML, allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (303, "/review/login?next=/review")
    assert (await client.get("/review", headers=_basic("ana", "nope"))).status == 401
    response = await client.get("/review", headers={**HTML, **_basic("ana", "pw")})
    assert response.status == 503 and "Reading the review queue" in await response.text()
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    page = await client.get("/review/login", headers=HTML)
    assert page.status == 200 and "guardrail_review_login" in page.headers["Set-Cookie"]
    assert "SameSite=Strict" in page.headers["Set-Cookie"]
    assert "HttpOnly" in page.headers["Set-Cookie"]
    # Unprotected: the read-only pages work as before.
    assert (await client.get("/dashboard?refresh=0")).status == 200


async def test_sign_in_sets_a_session_that_opens_protected_pages(client_for, users_file):
    client = await client_for(_settings(review_users_file=users_file, review_protect_pages=True))
    assert (await client.get("/health")).status == 200  # probes have no credentials
    for path in ("/dashboard?refresh=0", "/rates", "/metrics"):
        assert (await client.get(path)).status == 401
    response = await client.get("/dashboard?refresh=0", headers=HTML, allow_redirects=False)
    assert response.headers["Location"] == "/review/login?next=/dashboard%3Frefresh%3D0"
    assert (await client.get("/metrics", headers=_basic("ana", "pw"))).status == 200
    login = await client.get("/review/login?next=/dashboard?refresh=0", headers=HTML)
    token = (await login.text()).split('name="csrf" value="')[1].split('"')[0]
    wrong = await client.post("/review/login", data={"csrf": token, "name": "ana",
                                                     "password": "no", "next": "/dashboard"})
    assert wrong.status == 401
    forged = await client.post("/review/login", data={"csrf": _forged(token), "name": "ana",
                                                      "password": "pw"})
    assert forged.status == 403
    response = await client.post("/review/login", allow_redirects=False, data={
        "csrf": token, "name": "ana", "password": "pw", "next": "//evil.example/"})
    assert (response.status, response.headers["Location"]) == (303, "/review")
    assert "guardrail_review=" in response.headers.getall("Set-Cookie")[0]
    assert (await client.get("/dashboard?refresh=0")).status == 200  # the cookie opens it
