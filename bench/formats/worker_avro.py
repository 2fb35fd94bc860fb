"""A worker on an Avro topic (Avro results) against the same worker on JSON.

    python bench/formats/worker_avro.py [--messages 10000] [--seconds 15]

The ceiling run of ``bench/worker/ceiling.py`` (a backlog produced first, the
judge answering at once, the rate from the results' Kafka timestamps after a
1 s warm-up, the worker's own CPU per result), twice: on guardrail's case JSON,
then on the same cases as Avro records in the registry wire format, judged with
``input_format: avro`` and written with ``results_format: avro``. Apicurio
Registry runs on loopback (``python -m guardrail.kafka.apicurio fetch`` first).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import fastavro

from bench.common import JudgeProc, meta, running_broker, write_json
from bench.worker import ceiling
from guardrail.formats.registry_wire import frame
from guardrail.kafka.apicurio import ApicurioRegistry
from guardrail.kafka.registry_settings import RegistrySettings
from guardrail.kafka.schema_registry import SchemaRegistryClient

#: The case JSON of bench.common.cases, field for field.
CASE_SCHEMA = {"type": "record", "name": "BenchCase", "namespace": "bench", "fields": [
    {"name": "case_id", "type": "string"}, {"name": "output", "type": "string"},
    {"name": "metadata", "type": {"type": "map", "values": "string"}}]}


def avro_cases(url: str, topic_hint: str):
    """``bench.common.cases`` with each value re-written as a framed Avro record."""
    client = SchemaRegistryClient(RegistrySettings(schema_registry_url=url))

    async def register() -> int:
        try:
            return await client.register(f"{topic_hint}-value", "AVRO", json.dumps(CASE_SCHEMA))
        finally:
            await client.close()

    schema_id = asyncio.run(register())
    parsed = fastavro.parse_schema(CASE_SCHEMA)
    plain = ceiling.cases

    def cases(n: int, **options: Any) -> list[tuple[bytes, bytes, int | None]]:
        out = []
        for key, value, stamp in plain(n, **options):
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, json.loads(value))
            out.append((key, frame(schema_id, buffer.getvalue()), stamp))
        return out

    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=18650, help="the registry's port (+1)")
    args = parser.parse_args()
    info = meta()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, running_broker() as bootstrap, \
            JudgeProc(0) as judge:
        registry = ApicurioRegistry(args.port, management_port=args.port + 1,
                                    workdir=Path(tmp) / "registry").start()
        try:
            runs["json"] = ceiling.run_kind("guardrail", bootstrap, judge.api_base,
                                            Path(tmp) / "json", args.messages,
                                            seconds=args.seconds)
            # The backlog is made by ceiling's `cases`: the Avro run swaps in its own.
            ceiling.cases = avro_cases(registry.ccompat_url, "bench-avro")
            runs["avro"] = ceiling.run_kind(
                "guardrail", bootstrap, judge.api_base, Path(tmp) / "avro", args.messages,
                seconds=args.seconds, input_format="avro", results_format="avro",
                schema_registry_url=registry.ccompat_url)
        finally:
            registry.stop()
    for name, run in runs.items():
        print(f"{name:5} {run['msgs_per_s']:8.0f} msgs/s  {run['cpu_ms_per_msg']} ms CPU/msg "
              f"({run['measured_records']} results in {run['measured_seconds']} s)")
    write_json("worker-avro", {"meta": info, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
