"""A lean HTTP/1.1 client for the judge's JSON POSTs, on asyncio's protocols.

The direct judge path makes one POST per judged message, so what the client
spends per call is spent per message. aiohttp's request path (its session,
timers, tracing hooks, header multidicts and stream readers) cost a worker
about 0.3 ms of CPU per call against a judge answering at once, about a
sixth of a judged message's CPU; this client does the same round trip in
about a third of that (``python bench/judge/judge_alone.py``)::

    client = HTTP1Client("http://127.0.0.1:8000/v1/chat/completions",
                         headers={"Authorization": "Bearer sk-..."})
    status, body = await client.post(b'{"model": "qwen", ...}', timeout=30)
    await client.aclose()

What it speaks: ``http`` and ``https`` (certificates checked against the
system's store, as aiohttp does by default), keep-alive connections pooled
per event loop and closed after :data:`IDLE_SECONDS` unused, answers framed
by ``Content-Length``, chunked or by the end of the connection, ``gzip`` and
``deflate`` bodies, informational (1xx) answers skipped. Like the aiohttp
session it replaces, it reads no proxy settings from the environment.

Errors: a refused, reset or lost connection, or an answer that is not
HTTP/1.x, raises :class:`HTTPConnectionError` (a ``ConnectionError``: the
judge counts it as transient); a slow server raises ``TimeoutError`` from
``asyncio.timeout``. A request on a pooled connection that the server had
closed meanwhile (no byte of an answer came) is sent once more on a new
connection, as any keep-alive client must.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "IDLE_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "HTTP1Client",
    "HTTPConnectionError",
    "HTTPProtocolError",
]

#: A pooled connection unused this long is closed rather than reused (servers
#: close theirs after 5 s (uvicorn) to 75 s (nginx); aiohttp's default is 15 s).
IDLE_SECONDS = 15.0
#: An answer's status line and headers larger than this are refused.
MAX_HEAD_BYTES = 64 * 1024
#: An answer body larger than this (after decompression) is refused.
MAX_BODY_BYTES = 64 * 1024 * 1024

_HEAD_END = b"\r\n\r\n"
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _UNTIL_CLOSE = range(6)


class HTTPConnectionError(ConnectionError):
    """The connection was refused, reset or closed before the answer was whole."""


class HTTPProtocolError(HTTPConnectionError):
    """The server's answer is not well-formed HTTP/1.x (or is over a size limit)."""


class _Answer:
    """What the head of one answer says."""

    __slots__ = ("headers", "keep_alive", "status")

    def __init__(self, status: int, headers: dict[str, str], keep_alive: bool) -> None:
        self.status, self.headers, self.keep_alive = status, headers, keep_alive


def _parse_head(head: bytes) -> _Answer:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HTTPProtocolError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise HTTPProtocolError(f"malformed header line: {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        # Repeated headers join with a comma, as RFC 9110 allows for list fields.
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    connection = headers.get("connection", "").lower()
    keep_alive = ("keep-alive" in connection if version == "HTTP/1.0"
                  else "close" not in connection)
    return _Answer(int(code), headers, keep_alive)


def _decoded(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise HTTPProtocolError(f"unsupported Content-Encoding {encoding!r}")
    wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error:
        if encoding != "deflate":
            raise HTTPProtocolError(f"a {encoding} body that does not decompress") from None
        try:  # some servers send raw deflate without the zlib wrapper
            out = zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, MAX_BODY_BYTES + 1)
        except zlib.error:
            raise HTTPProtocolError("a deflate body that does not decompress") from None
    if len(out) > MAX_BODY_BYTES:
        raise HTTPProtocolError(f"answer body over {MAX_BODY_BYTES} bytes")
    return out


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = time.monotonic()
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._state = _HEAD
        self._answer: _Answer | None = None
        self._needed = 0  # bytes of the body (or of this chunk) still to come
        self._body = bytearray()
        self.got_bytes = False

    # asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.lost = True  # bytes nobody asked for: never reuse this connection
            self.close()
            return
        self.got_bytes = True
        self._buffer += data
        try:
            self._advance()
        except HTTPProtocolError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._waiter is None or self._waiter.done():
            return
        if self._state == _UNTIL_CLOSE:
            self._finish(keep_alive=False)
            return
        where = "in the middle of the answer" if self.got_bytes else "before answering"
        self._fail(HTTPConnectionError(f"the judge server closed the connection {where}"
                                       + (f": {exc}" if exc else "")))

    # one round trip -----------------------------------------------------------------------
    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes, bool]:
        """Send one request; the answer's status, decoded body and whether to reuse."""
        self._state, self._answer, self.got_bytes = _HEAD, None, False
        if self.lost or self.transport is None or self.transport.is_closing():
            raise HTTPConnectionError("the judge server closed the connection before answering")
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    # parsing ------------------------------------------------------------------------------
    def _advance(self) -> None:
        while self._waiter is not None and not self._waiter.done():
            if self._state == _HEAD:
                if not self._read_head():
                    return
            elif self._state == _LENGTH:
                if len(self._buffer) < self._needed:
                    return
                self._body += self._buffer[:self._needed]
                del self._buffer[:self._needed]
                self._finish(keep_alive=self._answer is not None and self._answer.keep_alive)
            elif self._state in (_CHUNK_SIZE, _CHUNK_DATA, _TRAILER):
                if not self._read_chunked():
                    return
            else:  # _UNTIL_CLOSE: everything until the server closes
                self._take_body(bytes(self._buffer))
                self._buffer.clear()
                return

    def _read_head(self) -> bool:
        end = self._buffer.find(_HEAD_END)
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise HTTPProtocolError(f"answer head over {MAX_HEAD_BYTES} bytes")
            return False
        answer = _parse_head(bytes(self._buffer[:end]))
        del self._buffer[:end + 4]
        if 100 <= answer.status < 200:
            if answer.status == 101:
                raise HTTPProtocolError("the server switched protocols")
            return True  # 100 Continue, 103 Early Hints: the real answer follows
        self._answer, self._body = answer, bytearray()
        headers = answer.headers
        if answer.status in (204, 304):
            self._finish(keep_alive=answer.keep_alive)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            length = headers["content-length"].split(",")[0].strip()
            if not length.isdigit():
                raise HTTPProtocolError(f"bad Content-Length {length!r}")
            self._needed = int(length)
            if self._needed > MAX_BODY_BYTES:
                raise HTTPProtocolError(f"answer body over {MAX_BODY_BYTES} bytes")
            self._state = _LENGTH
        else:
            self._state = _UNTIL_CLOSE
        return True

    def _read_chunked(self) -> bool:
        if self._state == _CHUNK_DATA:
            if len(self._buffer) < self._needed + 2:
                return False
            if self._buffer[self._needed:self._needed + 2] != b"\r\n":
                raise HTTPProtocolError("a chunk not followed by CRLF")
            self._take_body(bytes(self._buffer[:self._needed]))
            del self._buffer[:self._needed + 2]
            self._state = _CHUNK_SIZE
            return True
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise HTTPProtocolError("a chunk size line too long")
            return False
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 2]
        if self._state == _TRAILER:  # trailer fields end with an empty line
            if not line:
                self._finish(keep_alive=self._answer is not None and self._answer.keep_alive)
            return True
        size = line.split(b";", 1)[0].strip()
        try:
            self._needed = int(size, 16)
        except ValueError:
            raise HTTPProtocolError(f"bad chunk size {size[:20]!r}") from None
        self._state = _CHUNK_DATA if self._needed else _TRAILER
        return True

    def _take_body(self, data: bytes) -> None:
        self._body += data
        if len(self._body) > MAX_BODY_BYTES:
            raise HTTPProtocolError(f"answer body over {MAX_BODY_BYTES} bytes")

    def _finish(self, *, keep_alive: bool) -> None:
        answer = self._answer
        assert answer is not None and self._waiter is not None
        try:
            body = _decoded(bytes(self._body), answer.headers.get("content-encoding", ""))
        except HTTPProtocolError as exc:
            self._fail(exc)
            return
        self._body = bytearray()
        reusable = keep_alive and not self._buffer and not self.lost
        self._state = _HEAD
        self._waiter.set_result((answer.status, body, reusable))

    def _fail(self, exc: BaseException) -> None:
        self.lost = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()


class HTTP1Client:
    """POST to one URL over pooled keep-alive connections (see the module doc).

    ``headers`` go on every request besides ``Host``, ``Content-Length`` and
    ``Accept-Encoding``. No cap on connections: the caller's concurrency limit
    is the only one. A client belongs to the event loop that first uses it; used
    from another loop it opens a new pool (as the aiohttp session it replaces did).
    """

    def __init__(self, url: str, *, headers: dict[str, str] | None = None) -> None:
        self._extra_headers = dict(headers or {})
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | None = None
        self.url = url

    @property
    def url(self) -> str:
        return self._url

    @url.setter
    def url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._url, self._tls = url, parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}",
                 "Accept-Encoding: gzip, deflate"]
        lines += [f"{name}: {value}" for name, value in self._extra_headers.items()]
        self._head_prefix = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def post(self, body: bytes, *, timeout: float | None) -> tuple[int, bytes]:
        """The status and decoded body of the answer to one POST of ``body``."""
        head = self._head_prefix + str(len(body)).encode() + _HEAD_END
        async with asyncio.timeout(timeout):
            connection = self._pooled()
            if connection is not None:
                try:
                    return await self._round_trip(connection, head, body)
                except HTTPConnectionError as exc:
                    if connection.got_bytes or isinstance(exc, HTTPProtocolError):
                        raise
                    # The server closed this idle connection as we sent: one new try.
            return await self._round_trip(await self._connect(), head, body)

    async def _round_trip(self, connection: _Connection, head: bytes,
                          body: bytes) -> tuple[int, bytes]:
        try:
            status, answer, reusable = await connection.request(head, body)
        except BaseException:
            connection.close()  # mid-answer after a timeout or an error: unusable
            raise
        if reusable:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()
        return status, answer

    def _pooled(self) -> _Connection | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._drop_idle()  # a pool of another loop's connections cannot be used here
            self._loop = loop
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if (not connection.lost and connection.transport is not None
                    and not connection.transport.is_closing()
                    and now - connection.idle_since < IDLE_SECONDS):
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {}
        if self._tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            options = {"ssl": self._ssl, "server_hostname": self._host}
        try:
            _, connection = await loop.create_connection(_Connection, self._host, self._port,
                                                         **options)
        except (OSError, ssl.SSLError) as exc:
            raise HTTPConnectionError(f"cannot connect to {self._host}:{self._port}: "
                                      f"{exc}") from exc
        return connection

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            try:
                connection.close()
            except RuntimeError:  # its loop is closed: the socket went with it
                pass

    async def aclose(self) -> None:
        """Close the pooled connections (idempotent; the client may be used again)."""
        self._drop_idle()
