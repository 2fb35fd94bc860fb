"""The judge's HTTP/1.1 client (guardrail/judges/http1.py) against a scripted
server on loopback: framing, keep-alive reuse, compressed bodies, a pooled
connection the server closed, timeouts, malformed answers and TLS."""

import asyncio
import gzip
import ssl
import zlib

import pytest

from guardrail._processes import free_port
from guardrail.judges.http1 import HTTP1Client, HTTPConnectionError, HTTPProtocolError
from guardrail.judges.transports import HTTPStatusError, OpenAICompatibleClient
from guardrail.kafka.apache import KafkaUnavailable, make_tls_files


def _answer(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class ScriptedServer:
    """Reads whole requests; ``reply(request_index, head, body, writer)`` answers each.

    ``connections`` counts accepted connections, ``requests`` keeps (head, body).
    """

    def __init__(self, reply, tls: ssl.SSLContext | None = None) -> None:
        self.reply, self.tls = reply, tls
        self.connections, self.requests = 0, []
        self.writers = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://localhost:{port}/v1/chat?x=1"
        return self

    async def __aexit__(self, *exc):
        for writer in self.writers:
            writer.close()
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                await self.reply(len(self.requests) - 1, head, body, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return  # a handler cancelled at shutdown would otherwise log as an error


async def echo(index, head, body, writer):
    writer.write(_answer(body))


async def exchange(reply, *bodies, pause=0.0):
    """Post ``bodies`` in turn (``pause`` s apart) to a server answering with ``reply``;
    the server and the (status, body) answers."""
    async with ScriptedServer(reply) as server:
        client = HTTP1Client(server.url)
        answers = []
        for body in bodies:
            answers.append(await client.post(body, timeout=5))
            await asyncio.sleep(pause)
        await client.aclose()
    return server, answers


async def refused_post(reply, error, match):
    """One post to a server answering with ``reply``; the server, once it raised ``error``."""
    async with ScriptedServer(reply) as server:
        client = HTTP1Client(server.url)
        with pytest.raises(error, match=match):
            await client.post(b"{}", timeout=5)
        await client.aclose()
    return server


async def test_answers_come_back_in_order_over_one_kept_alive_connection():
    async with ScriptedServer(echo) as server:
        client = HTTP1Client(server.url, headers={"Authorization": "Bearer k"})
        for i in range(3):
            assert await client.post(b'{"n": %d}' % i, timeout=5) == (200, b'{"n": %d}' % i)
        await client.aclose()
    assert server.connections == 1
    head = server.requests[0][0].decode()
    assert head.startswith("POST /v1/chat?x=1 HTTP/1.1\r\n")
    assert f"Host: localhost:{server.url.split(':')[2].split('/')[0]}" in head
    assert "Authorization: Bearer k" in head and "Content-Length: 8" in head


async def test_concurrent_posts_each_get_their_own_answer():
    async def slow_echo(index, head, body, writer):
        await asyncio.sleep(0.01 * (index % 3))
        writer.write(_answer(body))

    async with ScriptedServer(slow_echo) as server:
        client = HTTP1Client(server.url)
        bodies = [b"%d" % i for i in range(20)]
        answers = await asyncio.gather(*(client.post(b, timeout=5) for b in bodies))
        assert [body for _, body in answers] == bodies
        await client.aclose()


async def test_chunked_answers_with_extensions_and_trailers_are_read_whole():
    async def chunked(index, head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5;ext=1\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)  # the rest in a second segment
        writer.write(b"6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n")

    server, answers = await exchange(chunked, b"{}", b"{}")
    assert answers == [(200, b"hello world")] * 2 and server.connections == 1


async def test_an_answer_framed_by_the_connection_closing_is_read_whole_and_not_reused():
    async def until_close(index, head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body * 2)
        await writer.drain()
        writer.close()

    server, answers = await exchange(until_close, b"ab", b"cd")
    assert answers == [(200, b"abab"), (200, b"cdcd")] and server.connections == 2


@pytest.mark.parametrize("encoding, pack", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, no zlib wrapper
])
async def test_compressed_bodies_are_decoded(encoding, pack):
    async def compressed(index, head, body, writer):
        writer.write(_answer(pack(b'{"ok": true}' * 50), f"Content-Encoding: {encoding}"))

    _, answers = await exchange(compressed, b"{}")
    assert answers == [(200, b'{"ok": true}' * 50)]


async def test_an_informational_answer_is_skipped_for_the_real_one():
    async def continue_first(index, head, body, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + _answer(b"done", status="201 Created"))

    _, answers = await exchange(continue_first, b"{}")
    assert answers == [(201, b"done")]


async def test_a_pooled_connection_the_server_closed_is_replaced_without_an_error():
    async def answer_then_close(index, head, body, writer):
        writer.write(_answer(body))
        await writer.drain()
        writer.close()  # the server ends keep-alive without saying so

    server, answers = await exchange(answer_then_close, b"one", b"two", pause=0.05)
    assert answers == [(200, b"one"), (200, b"two")]
    assert [body for _, body in server.requests] == [b"one", b"two"]


async def test_a_pooled_connection_closed_before_answering_is_tried_once_more_on_a_new_one():
    async def drop_the_second(index, head, body, writer):
        if index == 1:  # as a server closing an idle connection the moment a request came
            writer.close()
            return
        writer.write(_answer(body))

    server, answers = await exchange(drop_the_second, b"one", b"two")
    assert answers == [(200, b"one"), (200, b"two")] and server.connections == 2
    assert [body for _, body in server.requests] == [b"one", b"two", b"two"]


async def test_a_new_connection_closed_before_answering_is_an_error_not_a_retry():
    async def drop(index, head, body, writer):
        writer.close()

    server = await refused_post(drop, HTTPConnectionError, "before answering")
    assert len(server.requests) == 1  # the judge's own retries decide what comes next


async def test_a_connection_lost_mid_answer_is_an_error_and_the_request_is_not_sent_again():
    async def half(index, head, body, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    server = await refused_post(half, HTTPConnectionError, "in the middle of the answer")
    assert len(server.requests) == 1


@pytest.mark.parametrize("reply, match", [
    (b"hello there\r\n\r\n", "not an HTTP/1.x answer"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nxx",
     "unsupported Content-Encoding"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx",
     "does not decompress"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000, "head over"),
])
async def test_a_malformed_answer_is_a_protocol_error(reply, match):
    async def garbage(index, head, body, writer):
        writer.write(reply)

    server = await refused_post(garbage, HTTPProtocolError, match)
    assert len(server.requests) == 1  # never retried as if the connection were stale


async def test_a_late_answer_is_never_taken_for_the_next_request():
    async def first_slow(index, head, body, writer):
        if index == 0:
            await asyncio.sleep(0.3)
        writer.write(_answer(body))

    async with ScriptedServer(first_slow) as server:
        client = HTTP1Client(server.url)
        with pytest.raises(TimeoutError):
            await client.post(b"late", timeout=0.1)
        assert await client.post(b"next", timeout=5) == (200, b"next")
        await client.aclose()
    assert server.connections == 2


async def test_bytes_sent_on_an_idle_connection_retire_it():
    async def then_noise(index, head, body, writer):
        writer.write(_answer(body))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")

    server, answers = await exchange(then_noise, b"a", b"b", pause=0.1)
    assert answers == [(200, b"a"), (200, b"b")] and server.connections == 2


async def test_a_refused_connection_is_a_connection_error():
    client = HTTP1Client(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    with pytest.raises(HTTPConnectionError, match="cannot connect"):
        await client.post(b"{}", timeout=5)


def test_only_http_urls_are_taken():
    with pytest.raises(ValueError, match="not an http"):
        HTTP1Client("ftp://example.com/v1")


async def test_an_error_status_comes_back_as_http_status_error_with_its_body():
    async def refuse(index, head, body, writer):
        writer.write(_answer(b'{"error": "no such model"}', status="404 Not Found"))

    async with ScriptedServer(refuse) as server:
        client = OpenAICompatibleClient(server.url.split("/v1")[0] + "/v1", api_key="sk-1")
        with pytest.raises(HTTPStatusError) as raised:
            await client.post({"model": "m"}, timeout=5)
        await client.aclose()
    assert raised.value.status_code == 404 and "no such model" in str(raised.value)
    head = server.requests[0][0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1")
    assert "Authorization: Bearer sk-1" in head


# TLS --------------------------------------------------------------------------------------

def _server_tls(tmp_path):
    """The CA file to trust and a server context with a certificate it signed
    (the throwaway CA the Kafka security tests use; needs ``openssl``)."""
    try:
        tls = make_tls_files(tmp_path / "tls")
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tls.cert_pem, tls.key_pem)
    return tls.ca_pem, server_tls


async def test_https_checks_the_certificate_against_the_trusted_store(tmp_path, monkeypatch):
    ca_path, server_tls = _server_tls(tmp_path)
    async with ScriptedServer(echo, tls=server_tls) as server:
        untrusting = HTTP1Client(server.url)
        with pytest.raises(HTTPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.post(b"{}", timeout=5)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_path))  # OpenSSL's trusted store
        trusting = HTTP1Client(server.url)
        assert await trusting.post(b'{"tls": 1}', timeout=5) == (200, b'{"tls": 1}')
        assert await trusting.post(b'{"tls": 2}', timeout=5) == (200, b'{"tls": 2}')
        await trusting.aclose()
    # The refused handshake never reached the handler; the trusted one was kept alive.
    assert server.connections == 1
