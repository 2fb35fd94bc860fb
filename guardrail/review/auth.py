"""Who may write: the reviewers' users file, passwords, sessions and CSRF tokens.

The users file holds ``name:bcrypt-hash`` lines as ``htpasswd -B`` writes
them (``$2y$``; ``$2b$`` and ``$2a$`` from other bcrypt tools are accepted
too). Anything else refuses to start, naming the file and line, never the hash::

    users = Users.load(Path("reviewers.htpasswd"))   # ConfigError on a bad line
    await users.verify("ana", "secret")              # bcrypt, in a thread; cached briefly
    tokens = Tokens()                                # a fresh random key per process
    cookie = tokens.session("ana", users.stamp("ana"))
    session = tokens.open_session(cookie, users)     # Session("ana", nonce) or None
    token = tokens.csrf("ana", session.nonce)        # in every form
    tokens.check_csrf(token, "ana", session.nonce)   # on every form POST

Everything signed (session cookies, CSRF tokens, sign-in tokens) is an
HMAC-SHA256 under a key drawn at process start: a restart signs browsers out,
and a cookie from one worker is not valid at another (point reviewers at one
worker, or use basic auth, which every worker checks alike). A session is
also bound to the user's current hash, so changing or removing a password in
the file ends that user's sessions once the file is read again (it is
re-read when it changes, checked at most every few seconds).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from ..errors import ConfigError

__all__ = ["Users", "Tokens", "Session", "parse_basic", "SESSION_SECONDS", "BCRYPT_PREFIXES"]

log = logging.getLogger("guardrail.review")

#: How long a sign-in lasts (a working day), and a CSRF token with it.
SESSION_SECONDS = 12 * 3600
#: bcrypt's variants: htpasswd -B writes $2y$, Python's bcrypt $2b$, older tools $2a$.
BCRYPT_PREFIXES = ("$2y$", "$2b$", "$2a$")
_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")
_NAME = re.compile(r"[^\s:]{1,64}")
#: A successful password check is remembered this long: bcrypt costs ~0.1-0.3 s,
#: and scripts using basic auth send the password with every request.
VERIFY_CACHE_SECONDS = 300.0
#: How often, at most, the users file is looked at for changes.
RELOAD_CHECK_SECONDS = 5.0


def _parse(path: Path, text: str) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        where = f"review_users_file {path} line {number}"
        if not sep or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: expected name:bcrypt-hash (as htpasswd -B writes), "
                              "a name without spaces or colons")
        if not _BCRYPT.fullmatch(hashed):
            kind = "a bcrypt hash cut short" if hashed.startswith(BCRYPT_PREFIXES) else \
                "not a bcrypt hash"
            raise ConfigError(f"{where}: the password of {name!r} is {kind}; only bcrypt is "
                              f"accepted: htpasswd -B {path} {name}")
        if name in users:
            raise ConfigError(f"{where}: {name!r} appears twice")
        # bcrypt's $2y$ (PHP, htpasswd) and $2b$ are the same algorithm.
        users[name] = ("$2b$" + hashed[4:]).encode() if hashed.startswith("$2y$") \
            else hashed.encode()
    if not users:
        raise ConfigError(f"review_users_file {path} names no reviewer; add one with "
                          f"htpasswd -B {path} NAME")
    return users


class Users:
    """The reviewers of the users file, re-read when the file changes."""

    def __init__(self, path: Path, users: dict[str, bytes], mtime: float | None = None) -> None:
        self.path = path
        self._users = users
        self._mtime = mtime
        self._checked = time.monotonic()
        self._verified: dict[bytes, float] = {}  # digest of name+password+hash -> until
        self._salt = secrets.token_bytes(16)
        # Checked for unknown names too, at the file's cost, so that timing does
        # not tell who exists.
        cost = int(next(iter(users.values()))[4:6]) if users else 10
        self._dummy = bcrypt.hashpw(b"-", bcrypt.gensalt(rounds=max(4, cost)))

    @classmethod
    def load(cls, path: Path) -> Users:
        """Read the file; :class:`ConfigError` naming the line when it is unusable."""
        try:
            text = path.read_text(encoding="utf-8")
            mtime = path.stat().st_mtime
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"review_users_file {path}: cannot read it "
                              f"({type(exc).__name__}: {exc.args[-1] if exc.args else ''})") \
                from None
        return cls(path, _parse(path, text), mtime)

    @property
    def names(self) -> list[str]:
        self._maybe_reload()
        return sorted(self._users)

    def stamp(self, name: str) -> bytes | None:
        """A digest of the user's current hash (sessions are bound to it); None
        when the user is not (any more) in the file."""
        self._maybe_reload()
        hashed = self._users.get(name)
        return None if hashed is None else hashlib.sha256(hashed).digest()[:16]

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_SECONDS:
            return
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime
            if mtime == self._mtime:
                return
            self._users = _parse(self.path, self.path.read_text(encoding="utf-8"))
            self._mtime = mtime
            self._verified.clear()
            log.info("review users file %s re-read: %d reviewers", self.path, len(self._users))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            # A half-written or broken file must not lock everyone out (or in).
            log.error("review users file %s changed but cannot be used (%s); keeping the "
                      "reviewers read before", self.path, exc)

    def _key(self, name: str, password: str, hashed: bytes) -> bytes:
        return hashlib.sha256(self._salt + b"\0".join(
            (name.encode(), password.encode("utf-8", "surrogatepass"), hashed))).digest()

    def check(self, name: str, password: str) -> bool:
        """The password is right for ``name`` (blocking: bcrypt on a miss)."""
        self._maybe_reload()
        hashed = self._users.get(name)
        secret = password.encode("utf-8", "surrogatepass")
        if hashed is None:
            bcrypt.checkpw(b"-", self._dummy)
            return False
        key = self._key(name, password, hashed)
        now = time.monotonic()
        if self._verified.get(key, 0.0) > now:
            return True
        # bcrypt reads 72 bytes at most; htpasswd cuts longer passwords the same way.
        if not bcrypt.checkpw(secret[:72], hashed):
            return False
        if len(self._verified) > 10_000:  # a bound; the next misses just cost bcrypt
            self._verified.clear()
        self._verified[key] = now + VERIFY_CACHE_SECONDS
        return True

    async def verify(self, name: str, password: str) -> bool:
        """:meth:`check` off the event loop: bcrypt must not stall the worker."""
        return await asyncio.to_thread(self.check, name, password)


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``(name, password)`` of an ``Authorization: Basic`` header, else None."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    return (name, password) if sep else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    """A signed-in browser: who, and the nonce its CSRF tokens are bound to."""

    name: str
    nonce: str


class Tokens:
    """Signs and checks session cookies, CSRF tokens and sign-in tokens."""

    def __init__(self, key: bytes | None = None, *, session_seconds: int = SESSION_SECONDS,
                 clock=time.time) -> None:
        self._key = key or secrets.token_bytes(32)
        self.session_seconds = session_seconds
        self._clock = clock
        self._revoked: dict[str, float] = {}  # session nonce -> its expiry

    def _sign(self, *parts: str | bytes) -> str:
        data = b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts)
        return _b64(hmac.new(self._key, data, hashlib.sha256).digest())

    def session(self, name: str, stamp: bytes) -> str:
        """A session cookie value for ``name`` (stamp: :meth:`Users.stamp`)."""
        expiry, nonce = str(int(self._clock()) + self.session_seconds), secrets.token_hex(12)
        user = _b64(name.encode())
        return ".".join((user, expiry, nonce, self._sign("session", user, expiry, nonce, stamp)))

    def open_session(self, value: str | None, users: Users) -> Session | None:
        """The session of a cookie value, or None: forged, expired, signed out, or
        the user's password changed since."""
        try:
            user, expiry, nonce, signature = (value or "").split(".")
            name = _unb64(user).decode()
            expires = int(expiry)
        except (ValueError, UnicodeDecodeError, binascii.Error):
            return None
        stamp = users.stamp(name)
        if stamp is None or expires < self._clock() or nonce in self._revoked:
            return None
        if not hmac.compare_digest(signature, self._sign("session", user, expiry, nonce, stamp)):
            return None
        return Session(name, nonce)

    def revoke(self, session: Session) -> None:
        """Sign a session out for good (its cookie stops working at once)."""
        now = self._clock()
        self._revoked = {n: t for n, t in self._revoked.items() if t > now}
        self._revoked[session.nonce] = now + self.session_seconds

    def csrf(self, name: str, binding: str) -> str:
        """A form token for ``name``; ``binding`` is the session nonce, or
        ``"basic"`` for a browser signed in with HTTP basic auth."""
        expiry, nonce = str(int(self._clock()) + self.session_seconds), secrets.token_hex(8)
        return ".".join((expiry, nonce, self._sign("csrf", name, binding, expiry, nonce)))

    def check_csrf(self, token: str | None, name: str, binding: str) -> bool:
        """The token was made here, for this user and session, and is not expired."""
        try:
            expiry, nonce, signature = (token or "").split(".")
            if int(expiry) < self._clock():
                return False
        except ValueError:
            return False
        return hmac.compare_digest(signature, self._sign("csrf", name, binding, expiry, nonce))

    def login_nonce(self) -> str:
        """A value for the sign-in form's cookie (the form's token is bound to it)."""
        return secrets.token_hex(16)

    def login_token(self, nonce: str) -> str:
        return self._sign("login", nonce)

    def check_login(self, nonce: str | None, token: object) -> bool:
        """The sign-in form was served to this browser (its cookie holds ``nonce``)."""
        if not nonce or not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(token, self._sign("login", nonce))
