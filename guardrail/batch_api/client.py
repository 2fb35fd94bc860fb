"""Async clients of batch APIs: the shared JSON-over-HTTP part and the
OpenAI-compatible files and batches endpoints.

::

    client = BatchClient("https://api.openai.com/v1", api_key="sk-...")
    file_id = await client.upload(b'{"custom_id": "r1", ...}\\n', name="chunk-0.jsonl")
    batch = await client.create(file_id, completion_window="24h")   # {"id", "status", ...}
    batch = await client.retrieve(batch["id"])
    lines = await client.content(batch["output_file_id"])            # bytes (JSONL)
    found = await client.find(input_file_id=file_id)                 # a batch made from it, or None
    await client.aclose()

Errors: :class:`BatchHTTPError` (with ``status_code``) for an error status or
an answer that is not a JSON object; connection failures are ``aiohttp.ClientError``.
Anthropic's Message Batches client (:mod:`~guardrail.batch_api.anthropic`)
shares :class:`JSONClient`.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

__all__ = ["BatchClient", "BatchHTTPError", "JSONClient", "ENDPOINT"]

#: The one endpoint the judge's requests go to.
ENDPOINT = "/v1/chat/completions"
#: Pages of the batch list read when looking for a batch made from a file
#: (the newest come first: a resumed chunk's batch is recent).
_LIST_PAGES = 5


class BatchHTTPError(Exception):
    """The batch API answered with an HTTP error status."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(f"HTTP {status_code}: {' '.join(body.split())[:300]}")
        self.status_code = status_code


class JSONClient:
    """One aiohttp session to ``api_base`` with fixed headers (the key's among them)."""

    def __init__(self, api_base: str, *, headers: dict[str, str], timeout: float = 120.0) -> None:
        self.api_base = api_base.rstrip("/")
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self._session

    async def _request(self, method: str, path: str, **kwargs: Any) -> bytes:
        """The body of ``api_base + path`` (``path`` may be a whole URL)."""
        url = path if path.startswith(("http://", "https://")) else self.api_base + path
        async with self._open().request(method, url, **kwargs) as response:
            raw = await response.read()
            if response.status >= 400:
                raise BatchHTTPError(response.status, raw.decode("utf-8", "replace"))
            return raw

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        raw = await self._request(method, path, **kwargs)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise BatchHTTPError(200, "answer is not a JSON object: "
                                 + raw[:200].decode("utf-8", "replace"))
        return data

    async def aclose(self) -> None:
        """Close the session (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


class BatchClient(JSONClient):
    """``{api_base}/files`` and ``{api_base}/batches`` (OpenAI-compatible)."""

    def __init__(self, api_base: str, *, api_key: str | None, timeout: float = 120.0) -> None:
        super().__init__(api_base, timeout=timeout,
                         headers={"Authorization": f"Bearer {api_key}"} if api_key else {})

    async def upload(self, content: bytes, *, name: str) -> str:
        """Upload a batch input file (purpose ``batch``); its file id."""
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", content, filename=name, content_type="application/jsonl")
        return str((await self._json("POST", "/files", data=form))["id"])

    async def create(self, input_file_id: str, *, completion_window: str,
                     metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """Create a batch of the file's requests to the chat completions endpoint."""
        body = {"input_file_id": input_file_id, "endpoint": ENDPOINT,
                "completion_window": completion_window, "metadata": metadata or {}}
        return await self._json("POST", "/batches", data=orjson.dumps(body),
                                headers={"Content-Type": "application/json"})

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/batches/{batch_id}")

    async def content(self, file_id: str) -> bytes:
        """A file's bytes (a batch's output or error file)."""
        return await self._request("GET", f"/files/{file_id}/content")

    async def find(self, *, input_file_id: str) -> dict[str, Any] | None:
        """The batch created from ``input_file_id``, if any: how a restart that
        was stopped between creating a batch and recording it finds it again."""
        after: str | None = None
        for _ in range(_LIST_PAGES):
            params = {"limit": "100", **({"after": after} if after else {})}
            page = await self._json("GET", "/batches", params=params)
            batches = [b for b in page.get("data") or () if isinstance(b, dict)]
            for batch in batches:
                if batch.get("input_file_id") == input_file_id:
                    return batch
            if not page.get("has_more") or not batches:
                return None
            after = str(batches[-1].get("id"))
        return None
