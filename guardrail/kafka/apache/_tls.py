"""Throwaway TLS material for a test broker: a CA and a broker certificate
for ``127.0.0.1`` / ``localhost``, made with the ``openssl`` command."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from ._jars import KafkaUnavailable

__all__ = ["TlsFiles", "make_tls_files"]


@dataclass(frozen=True)
class TlsFiles:
    """A CA and a broker certificate for ``127.0.0.1`` / ``localhost``, as PEM
    files for clients and a PKCS#12 keystore for the broker (the certificate
    and its key as PEM too, for a server on Python's ``ssl``)."""

    ca_pem: Path
    keystore: Path
    keystore_password: str
    cert_pem: Path
    key_pem: Path


def make_tls_files(folder: Path, *, days: int = 2) -> TlsFiles:
    """A throwaway CA and a broker certificate signed by it (``openssl``)."""
    folder.mkdir(parents=True, exist_ok=True)
    password = uuid.uuid4().hex
    ca_key, ca_pem = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "broker.key", folder / "broker.csr", folder / "broker.pem"
    ext = folder / "broker.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_pem,
         "-days", str(days), "-subj", "/CN=guardrail-test-ca"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", str(days), "-extfile", ext],
        ["pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", ca_pem,
         "-name", "broker", "-out", folder / "broker.p12", "-passout", f"pass:{password}"],
    ]
    if not shutil.which("openssl"):
        raise KafkaUnavailable("no openssl on PATH to make test certificates")
    for step in steps:
        done = subprocess.run(["openssl", *map(str, step)], capture_output=True, text=True)
        if done.returncode != 0:
            raise KafkaUnavailable(f"openssl {step[0]} failed: {done.stderr.strip()[:200]}")
    return TlsFiles(ca_pem=ca_pem, keystore=folder / "broker.p12", keystore_password=password,
                    cert_pem=cert, key_pem=key)
