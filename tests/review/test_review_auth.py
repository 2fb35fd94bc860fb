"""The reviewers' users file, passwords, sessions and CSRF tokens
(guardrail.review.auth) and the HTTP gate over them (guardrail.review.access),
with hashes from the real bcrypt library and, when installed, htpasswd."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess

import bcrypt
import pytest
from aiohttp.test_utils import make_mocked_request

from guardrail.errors import ConfigError
from guardrail.review import auth
from guardrail.review.access import SESSION_COOKIE, Gate, Identity, Refused, safe_next
from guardrail.review.auth import Tokens, Users, parse_basic


def _hash(password: str, prefix: bytes = b"2b") -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4, prefix=prefix)).decode()


def _y(hashed: str) -> str:
    """The same hash as htpasswd -B writes it ($2y$: PHP's name for the same algorithm)."""
    return "$2y$" + hashed[4:]


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "reviewers.htpasswd"
    path.write_text(f"# reviewers\nana:{_y(_hash('ana-secret'))}\n\n"
                    f"bob:{_hash('bob-secret')}\n")
    return path


@pytest.fixture
def users(users_file):
    return Users.load(users_file)


def test_y_and_b_hashes_are_read_and_checked(users):
    assert users.names == ["ana", "bob"]
    assert users.check("ana", "ana-secret") and users.check("bob", "bob-secret")
    assert users.check("ana", "ana-secret")  # remembered: no second bcrypt
    assert not users.check("ana", "bob-secret")
    assert not users.check("ana", "")
    assert not users.check("eve", "ana-secret")


@pytest.mark.skipif(not shutil.which("htpasswd"), reason="htpasswd not installed "
                    "(apt-get install apache2-utils)")
def test_a_file_htpasswd_wrote_is_accepted(tmp_path):
    path = tmp_path / "users"
    subprocess.run(["htpasswd", "-cbB", "-C", "5", str(path), "ana", "pässword"], check=True,
                   capture_output=True)
    assert path.read_text().startswith("ana:$2y$05$")
    users = Users.load(path)
    assert users.check("ana", "pässword") and not users.check("ana", "password")


@pytest.mark.parametrize("line, says", [
    ("ana:$apr1$abc$0123456789012345678901", "not a bcrypt hash"),
    ("ana:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "not a bcrypt hash"),
    ("ana:plaintext-password", "not a bcrypt hash"),
    ("ana:$2y$05$tooShort", "a bcrypt hash cut short"),
    ("just-a-name", "expected name:bcrypt-hash"),
    ("two words:$2y$05$" + "a" * 53, "expected name:bcrypt-hash"),
])
def test_other_hash_kinds_refuse_to_start_naming_the_line_not_the_hash(tmp_path, line, says):
    path = tmp_path / "users"
    path.write_text(f"bob:{_hash('x')}\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        Users.load(path)
    message = str(caught.value)
    assert f"{path} line 2" in message and says in message
    secret = line.partition(":")[2]
    assert not secret or secret not in message


def test_duplicate_names_an_empty_file_and_a_missing_file_refuse(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"ana:{_hash('a')}\nana:{_hash('b')}\n")
    with pytest.raises(ConfigError, match="line 2: 'ana' appears twice"):
        Users.load(path)
    path.write_text("# nobody yet\n")
    with pytest.raises(ConfigError, match="names no reviewer"):
        Users.load(path)
    with pytest.raises(ConfigError, match="cannot read it"):
        Users.load(tmp_path / "missing")


def test_a_changed_file_is_read_again_and_a_broken_one_ignored(users_file, users,
                                                               monkeypatch):
    monkeypatch.setattr(auth, "RELOAD_CHECK_SECONDS", 0.0)
    assert users.check("ana", "ana-secret")
    users_file.write_text(f"ana:{_hash('new-secret')}\n")
    os.utime(users_file, (1, 1))  # a different mtime, whatever the clock's resolution
    assert not users.check("ana", "ana-secret")  # the remembered check is forgotten
    assert users.check("ana", "new-secret") and users.names == ["ana"]
    users_file.write_text("ana:md5-is-not-welcome\n")
    os.utime(users_file, (2, 2))
    assert users.check("ana", "new-secret")  # the last good file still holds


def test_basic_header_parsing():
    encoded = base64.b64encode("ana:pa:ss wörd".encode()).decode()
    assert parse_basic(f"Basic {encoded}") == ("ana", "pa:ss wörd")
    assert parse_basic(f"basic  {encoded}") == ("ana", "pa:ss wörd")
    no_colon = "Basic " + base64.b64encode(b"no-colon").decode()
    for header in (None, "", "Bearer abc", "Basic !!!", no_colon):
        assert parse_basic(header) is None


class Clock:
    now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_are_signed_bound_to_the_password_and_can_be_revoked(users_file, users,
                                                                      monkeypatch):
    clock = Clock()
    tokens = Tokens(clock=clock)
    cookie = tokens.session("ana", users.stamp("ana"))
    session = tokens.open_session(cookie, users)
    assert session.name == "ana"
    user, expiry, nonce, signature = cookie.split(".")
    bob = base64.urlsafe_b64encode(b"bob").decode().rstrip("=")
    for forged in (f"{bob}.{expiry}.{nonce}.{signature}", f"{user}.{int(expiry) + 9}.{nonce}."
                   f"{signature}", f"{user}.{expiry}.{nonce}.{signature[:-2]}AA", "garbage",
                   "", None, Tokens(clock=clock).session("ana", users.stamp("ana"))):
        assert tokens.open_session(forged, users) is None
    clock.now += tokens.session_seconds + 1
    assert tokens.open_session(cookie, users) is None  # expired
    clock.now -= tokens.session_seconds + 1
    tokens.revoke(session)
    assert tokens.open_session(cookie, users) is None  # signed out
    cookie = tokens.session("ana", users.stamp("ana"))
    monkeypatch.setattr(auth, "RELOAD_CHECK_SECONDS", 0.0)
    users_file.write_text(f"ana:{_hash('changed')}\nbob:{_hash('b')}\n")
    os.utime(users_file, (3, 3))
    assert tokens.open_session(cookie, users) is None  # the password changed


def test_csrf_tokens_are_bound_to_user_and_session_and_expire():
    clock = Clock()
    tokens = Tokens(clock=clock)
    token = tokens.csrf("ana", "nonce-1")
    assert tokens.check_csrf(token, "ana", "nonce-1")
    expiry, nonce, signature = token.split(".")
    for name, binding, candidate in [
            ("bob", "nonce-1", token), ("ana", "nonce-2", token), ("ana", "basic", token),
            ("ana", "nonce-1", None), ("ana", "nonce-1", ""),
            ("ana", "nonce-1", f"{int(expiry) + 60}.{nonce}.{signature}"),
            ("ana", "nonce-1", f"{expiry}.{nonce}.{signature[:-1]}x"),
            ("ana", "nonce-1", Tokens(clock=clock).csrf("ana", "nonce-1"))]:
        assert not tokens.check_csrf(candidate, name, binding)
    clock.now += tokens.session_seconds + 1
    assert not tokens.check_csrf(token, "ana", "nonce-1")


def test_sign_in_tokens_are_bound_to_the_browser_cookie():
    tokens = Tokens()
    nonce = tokens.login_nonce()
    assert tokens.check_login(nonce, tokens.login_token(nonce))
    assert not tokens.check_login(tokens.login_nonce(), tokens.login_token(nonce))
    assert not tokens.check_login(None, tokens.login_token(nonce))
    assert not tokens.check_login(nonce, None)


def _request(method="POST", headers=None, cookies=None):
    headers = dict(headers or {})
    if cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    return make_mocked_request(method, "/review", headers=headers)


async def test_the_gate_identifies_basic_and_session_and_refuses_wrong_passwords(users):
    gate = Gate(users)
    basic = base64.b64encode(b"ana:ana-secret").decode()
    assert await gate.identify(_request(headers={"Authorization": f"Basic {basic}"})) == \
        Identity("ana", "basic")
    wrong = base64.b64encode(b"ana:nope").decode()
    with pytest.raises(Refused) as caught:
        await gate.identify(_request(headers={"Authorization": f"Basic {wrong}"}))
    assert caught.value.status == 401
    cookie = gate.tokens.session("bob", users.stamp("bob"))
    who = await gate.identify(_request(cookies={SESSION_COOKIE: cookie}))
    assert who.name == "bob" and who.via == "session"
    assert await gate.identify(_request(cookies={SESSION_COOKIE: cookie + "x"})) is None
    assert await gate.identify(_request()) is None


def test_form_posts_need_a_token_and_json_posts_need_basic_auth(users):
    gate = Gate(users)
    basic, session = Identity("ana", "basic"), Identity("ana", "session", auth.Session("ana",
                                                                                       "n1"))
    for who in (basic, session):
        gate.check_form_post(_request(), who, {"csrf": gate.csrf(who)})
        for form in ({}, {"csrf": ""}, {"csrf": gate.csrf(Identity("bob", "basic"))}):
            with pytest.raises(Refused) as caught:
                gate.check_form_post(_request(), who, form)
            assert caught.value.status == 403
        with pytest.raises(Refused, match="another site"):
            gate.check_form_post(_request(headers={"Sec-Fetch-Site": "cross-site"}), who,
                                 {"csrf": gate.csrf(who)})
    with pytest.raises(Refused, match="basic auth"):
        gate.check_json_post(_request(), session)
    gate.check_json_post(_request(), basic)
    assert gate.cross_site_fetch(_request("GET", {"Sec-Fetch-Site": "cross-site",
                                                  "Sec-Fetch-Mode": "no-cors"}))
    assert not gate.cross_site_fetch(_request("GET", {"Sec-Fetch-Site": "cross-site",
                                                      "Sec-Fetch-Mode": "navigate"}))


def test_sign_in_only_returns_to_local_paths():
    assert safe_next("/dashboard?refresh=0") == "/dashboard?refresh=0"
    for bad in (None, "", "https://evil.example/", "//evil.example/x", "/\\evil.example",
                "javascript:alert(1)", "/x\r\nSet-Cookie: a=b", b"/bytes", object()):
        assert safe_next(bad) == "/review"
