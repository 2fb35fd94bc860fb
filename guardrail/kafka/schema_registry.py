"""A client of a Schema Registry's Confluent-compatible REST API: schemas by id
(each asked once by its callers, who keep them) and schemas registered under a
subject::

    registry = SchemaRegistryClient(settings.registry)
    found = await registry.schema(7)          # Fetched("AVRO", "{…}", {}), or None: no such id
    found.imports                              # {"company/labels.proto": "…"}: its references
    schema_id = await registry.register("results-value", "AVRO", text)
    await registry.close()

A registry that does not answer, answers 5xx, refuses the credentials or is
not the API the URL should name raises :class:`RegistryUnavailable`: callers
wait and retry, they never decide a record on it. Only an explicit "no such
schema" (error code 40403) is an answer about the record.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.parse
from typing import Any, NamedTuple

import aiohttp
import orjson

from ..errors import ConfigError, GuardrailError
from .registry_settings import RegistrySettings

__all__ = ["Fetched", "RegistryUnavailable", "SchemaRegistryClient"]

#: Confluent's error code for "schema not found" (Apicurio's ccompat API says it too).
SCHEMA_NOT_FOUND = 40403
#: References of references followed this deep at most (a cycle stops earlier).
MAX_REFERENCE_DEPTH = 16
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryUnavailable(GuardrailError):
    """The registry could not be asked; the message says why, in one line."""


class Fetched(NamedTuple):
    """A schema as the registry holds it, with the schemas it references."""

    #: ``AVRO`` (also when the registry says none), ``PROTOBUF`` or ``JSON``.
    schema_type: str | None
    text: str
    #: Reference name (a Protobuf import path, an Avro full name) → its schema text,
    #: references of references first.
    imports: dict[str, str]


class SchemaRegistryClient:
    """One HTTP session to one registry (basic auth and a CA bundle as configured)."""

    def __init__(self, settings: RegistrySettings) -> None:
        if not settings.schema_registry_url:
            raise ConfigError("the registry formats need schema_registry_url")
        self.url = settings.schema_registry_url.rstrip("/")
        self.settings = settings
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            s = self.settings
            headers = {"Content-Type": _CONTENT_TYPE}
            if s.schema_registry_username:  # HTTP basic auth, written out (aiohttp 4 drops auth=)
                password = (s.schema_registry_password.get_secret_value()
                            if s.schema_registry_password else "")
                token = base64.b64encode(f"{s.schema_registry_username}:{password}".encode())
                headers["Authorization"] = "Basic " + token.decode("ascii")
            context = (ssl.create_default_context(cafile=str(s.schema_registry_cafile))
                       if s.schema_registry_cafile else None)
            self._session = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=s.schema_registry_timeout),
                connector=aiohttp.TCPConnector(ssl=context) if context else None)
        return self._session

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Status and decoded answer; every way of not getting one is unavailability."""
        try:
            async with self._open().request(
                    method, self.url + path,
                    data=None if body is None else orjson.dumps(body)) as answer:
                text = await answer.read()
                status = answer.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ssl.SSLError) as exc:
            raise RegistryUnavailable(f"schema registry {self.url} does not answer: "
                                      f"{type(exc).__name__} {exc}".strip()) from None
        try:
            data = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            data = None
        if status >= 500 or status in (401, 403, 408, 429):
            hint = " (check schema_registry_username/password)" if status in (401, 403) else ""
            raise RegistryUnavailable(f"schema registry {self.url} answered {status}{hint}: "
                                      f"{_message(data, text)}")
        return status, data

    async def schema(self, schema_id: int | str) -> Fetched | None:
        """The schema of an id, or of a GUID (text), with its references; None when
        the registry says it has no such schema. A registry without GUIDs answers
        404 for every one: those records cannot be read there, and go to the DLQ."""
        path = (f"/schemas/guids/{schema_id}" if isinstance(schema_id, str)
                else f"/schemas/ids/{schema_id}")
        status, data = await self._call("GET", path)
        not_found = isinstance(data, dict) and data.get("error_code") == SCHEMA_NOT_FOUND
        if status == 404 and (not_found or isinstance(schema_id, str)):
            return None
        if status != 200 or not isinstance(data, dict) or "schema" not in data:
            raise RegistryUnavailable(f"schema registry {self.url} answered {status} to "
                                      f"{path}, not a schema: is "
                                      "schema_registry_url the Confluent-compatible API?")
        imports: dict[str, str] = {}
        await self._references(data.get("references"), imports, 0)
        return Fetched(data.get("schemaType"), data["schema"], imports)

    async def _references(self, references: Any, found: dict[str, str], depth: int) -> None:
        """Each referenced schema (``subject`` at ``version``) into ``found`` by name,
        what it references first. One the registry does not have is left out: the
        schema then fails to compile, and its records go to the DLQ saying so."""
        for ref in references if isinstance(references, list) else ():
            name = ref.get("name") if isinstance(ref, dict) else None
            if not name or name in found or depth >= MAX_REFERENCE_DEPTH:
                continue
            subject = urllib.parse.quote(str(ref.get("subject", name)), safe="")
            status, data = await self._call("GET", f"/subjects/{subject}/versions/"
                                                   f"{ref.get('version', 'latest')}")
            if status != 200 or not isinstance(data, dict) or "schema" not in data:
                continue
            await self._references(data.get("references"), found, depth + 1)
            found[name] = data["schema"]

    async def register(self, subject: str, schema_type: str, text: str) -> int:
        """Register ``text`` under ``subject`` (the same text again returns its id)."""
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        status, data = await self._call("POST", f"/subjects/{subject}/versions", body)
        if status == 200 and isinstance(data, dict) and isinstance(data.get("id"), int):
            return int(data["id"])
        if status == 409 or (isinstance(data, dict) and data.get("error_code") in (409, 42201)):
            raise ConfigError(f"schema registry refused the schema under {subject}: "
                              f"{_message(data, b'')} (an incompatible schema is registered there)")
        raise RegistryUnavailable(f"schema registry {self.url} answered {status} registering "
                                  f"under {subject}: {_message(data, b'')}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _message(data: Any, text: bytes) -> str:
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:200]
    return text[:200].decode("utf-8", "replace") or "(no body)"
