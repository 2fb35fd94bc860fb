"""Per-record cost of the registry formats against JSON, schemas already cached.

In: one case record decoded into the case dict the stream validates (``case``
JSON; Avro, Protobuf and JSON Schema in the registry wire format). Out: one
result record (the JSON the stream writes; re-encoded as framed Avro, Protobuf or
JSON Schema by :class:`~guardrail.formats.registry_results.ResultEncoder`). No
registry and no broker: the schema book is filled first, as the worker's is
after its first batch of a schema id::

    python bench/formats/registry_codecs.py            # 20,000 records a format
"""

from __future__ import annotations

import _root  # noqa: F401  (the repository root on sys.path)

import argparse
import json
import time
from pathlib import Path

import orjson

from bench.common import meta
from guardrail.formats import CaseDecoder
from guardrail.formats.registry import RegistryDecoder, SchemaBook
from guardrail.formats.registry_results import ResultEncoder
from guardrail.formats.registry_wire import frame
from tests.formats.test_result_schemas import a_result

CASE = {"case_id": "case-000017", "output": "The central theme of Hamlet is mortality. " * 6,
        "input": "What is the central theme of Hamlet?", "metadata": {"model": "m-1",
                                                                       "model_version": "7"}}
AVRO = orjson.dumps({"type": "record", "name": "Case", "fields": [
    {"name": "case_id", "type": "string"}, {"name": "output", "type": "string"},
    {"name": "input", "type": "string"},
    {"name": "metadata", "type": {"type": "map", "values": "string"}}]}).decode()
PROTO = ('syntax = "proto3"; message Case { string case_id = 1; string output = 2; '
         'string input = 3; map<string, string> metadata = 4; }')
JSON_SCHEMA = orjson.dumps({"type": "object", "required": ["output"], "properties": {
    "case_id": {"type": "string"}, "output": {"type": "string"}, "input": {"type": "string"},
    "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}}).decode()


def per_record_us(work, values: list[bytes]) -> float:
    """Best of three passes, in microseconds a record."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for value in values:
            work(value)
        best = min(best, time.perf_counter() - started)
    return round(best / len(values) * 1e6, 2)


def decoding(n: int) -> dict[str, float]:
    book = SchemaBook()
    for schema_id, kind, text in ((1, None, AVRO), (2, "PROTOBUF", PROTO), (3, "JSON", JSON_SCHEMA)):
        book.learn(schema_id, kind, text)
    inputs = {
        "json": (CaseDecoder(), orjson.dumps(CASE)),
        "avro": (RegistryDecoder("avro", book, CaseDecoder()),
                 frame(1, book.codec(1).encode(CASE))),
        "protobuf": (RegistryDecoder("protobuf", book, CaseDecoder()),
                     frame(2, book.codec(2).encode(CASE), indexes=[0])),
        "json_schema": (RegistryDecoder("json_schema", book, CaseDecoder()),
                        frame(3, orjson.dumps(CASE))),
    }
    for name, (decoder, value) in inputs.items():
        assert decoder.decode(value, {}).cases[0]["output"] == CASE["output"], name
    return {name: per_record_us(lambda v, d=decoder: d.decode(v, {}), [value] * n)
            for name, (decoder, value) in inputs.items()}


def encoding(n: int) -> dict[str, float]:
    value = a_result()
    encoders = {"json": lambda v: v, "avro": ResultEncoder("avro", 1).encode,
                "protobuf": ResultEncoder("protobuf", 3).encode,
                "json_schema": ResultEncoder("json_schema", 2).encode}
    return {name: per_record_us(encode, [value] * n) for name, encode in encoders.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    figures = {"decode_case_us": decoding(args.records),
               "encode_result_us": encoding(args.records)}
    print(json.dumps(figures, indent=2))
    out = Path(_root.ROOT) / "bench" / "results" / "registry_codecs.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**meta(), "records": args.records, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
