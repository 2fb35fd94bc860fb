"""The local judge: model assembly from parts (fake parts, fast) and one real
judgment through ``guardrail judge serve`` (slow, needs ``guardrail[local]``)."""

import hashlib
import importlib.util
import os
import signal
import subprocess
import sys

import pytest

from guardrail.errors import ConfigError
from guardrail.local import model as model_module
from guardrail.local.model import (ModelIntegrityError, assemble_model, ensure_default_model,
                                   find_default_parts, is_verified)


def _parts(tmp_path, chunks):
    paths = []
    for i, data in enumerate(chunks, start=1):
        path = tmp_path / f"part{i:02d}.bin"
        path.write_bytes(data)
        paths.append(path)
    return paths, hashlib.sha256(b"".join(chunks)).hexdigest()


def test_parts_are_concatenated_in_order_verified_and_reused(tmp_path):
    parts, digest = _parts(tmp_path, [b"GGUF" + b"a" * 5000, b"b" * 7000, b"c" * 3])
    dest = tmp_path / "cache" / "model.gguf"
    seen = []
    assert assemble_model(parts, dest, digest, progress=lambda d, t: seen.append((d, t))) == dest
    assert dest.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert seen[-1] == (12007, 12007)
    assert is_verified(dest, digest)
    # Reused without touching the parts (they may be gone).
    for p in parts:
        p.unlink()
    assert assemble_model(parts, dest, digest) == dest


def test_a_wrong_digest_is_refused_and_leaves_nothing_behind(tmp_path):
    parts, digest = _parts(tmp_path, [b"x" * 100, b"y" * 100])
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelIntegrityError, match="expected " + "0" * 64):
        assemble_model(parts, dest, "0" * 64)
    assert list(dest.parent.iterdir()) == []  # no model, no partial file, no marker
    # Parts in the wrong order make a different file: refused too.
    with pytest.raises(ModelIntegrityError):
        assemble_model(list(reversed(parts)), dest, digest)
    assert not dest.exists()


def test_an_unverified_or_changed_file_is_checked_again(tmp_path):
    parts, digest = _parts(tmp_path, [b"one", b"two"])
    dest = tmp_path / "model.gguf"
    dest.write_bytes(b"onetwo")  # right content, no marker (e.g. copied by hand)
    assert assemble_model(parts, dest, digest) == dest and is_verified(dest, digest)
    dest.write_bytes(b"onetwX")  # corrupted after verification: the marker no longer fits
    os.utime(dest, ns=(1, 1))
    assert not is_verified(dest, digest)
    assemble_model(parts, dest, digest)
    assert dest.read_bytes() == b"onetwo"


def _fake_dist(root, index, data, version="0.2.0"):
    package = root / f"fakemodel_part{index}"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / f"part{index:02d}.bin").write_bytes(data)
    info = root / f"fakemodel_part{index}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakemodel-part{index}\n"
                                   f"Version: {version}\n")


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three fake part packages on sys.path standing in for the 22 real ones."""
    root = tmp_path / "site"
    chunks = [b"GGUF-first", b"-second-", b"third"]
    for i, data in enumerate(chunks, start=1):
        _fake_dist(root, i, data)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(model_module, "PART_DIST", "fakemodel-part{}")
    monkeypatch.setattr(model_module, "PART_MODULE", "fakemodel_part{}")
    monkeypatch.setattr(model_module, "PART_COUNT", 3)
    monkeypatch.setattr(model_module, "DEFAULT_MODEL_SHA256",
                        hashlib.sha256(b"".join(chunks)).hexdigest())
    return root, chunks


def test_the_default_model_is_found_through_installed_packages(fake_parts, tmp_path):
    root, chunks = fake_parts
    assert [p.name for p in find_default_parts()] == ["part01.bin", "part02.bin", "part03.bin"]
    path = ensure_default_model(tmp_path / "cache")
    assert path.read_bytes() == b"".join(chunks)
    assert path.name == model_module.DEFAULT_MODEL_NAME


def test_missing_or_wrong_version_parts_are_named(fake_parts, monkeypatch):
    root, _ = fake_parts
    monkeypatch.setattr(model_module, "PART_COUNT", 5)
    with pytest.raises(ConfigError, match=r"parts missing: 4, 5\).*guardrail\[local\]"):
        find_default_parts()
    monkeypatch.setattr(model_module, "PART_COUNT", 3)
    monkeypatch.setattr(model_module, "PART_VERSION", "9.9.9")
    with pytest.raises(ConfigError, match="needs 9.9.9"):
        find_default_parts()


def test_serve_refuses_a_missing_model_file_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "guardrail.cli", "judge", "serve",
                           "--model-path", str(tmp_path / "nope.gguf")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- one real judgment through the local model -------------------------------

def _local_model_or_skip():
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("xllamacpp is not installed (pip install 'guardrail[local]')")
    cached = model_module.default_cache_dir() / model_module.DEFAULT_MODEL_NAME
    if is_verified(cached, model_module.DEFAULT_MODEL_SHA256):
        return
    try:
        find_default_parts()
    except ConfigError as exc:
        pytest.skip(f"local model not installed: {exc}")


@pytest.fixture(scope="module")
def local_judge():
    """``guardrail judge serve`` as a user runs it, shared by this module's tests
    (loading the model is most of their time): its api_base, then a clean stop."""
    _local_model_or_skip()
    # One thread: the suite's three test processes share two cores, and
    # llama.cpp's threads wait on each other at every step when one of them is
    # descheduled (beside two busy processes: 361 s and a failed test with
    # 2 threads, 47 s and a pass with 1).
    server = subprocess.Popen([sys.executable, "-m", "guardrail.cli", "judge", "serve",
                               "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    try:
        api_base = server.stdout.readline().strip()  # blocks until the model is loaded
        assert api_base.startswith("http://127.0.0.1:"), api_base
        yield api_base
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(60)
    assert code == 0  # SIGTERM is a clean stop


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_real_judgments_through_the_local_model_carry_a_probability(local_judge):
    """The default metrics judged through ``guardrail judge serve`` in one
    several-metric call (the default): valid JSON through the schema, real
    token counts at no cost, the obvious verdict; llama.cpp returns token
    log-probabilities, so P(UNSAFE) is read at each metric's verdict. (One
    call: on two cores each call of the 1.5B model costs tens of seconds.)"""
    from guardrail.judges.build import build_evaluator
    from guardrail.local.server import judge_settings
    from guardrail.judging.models import Case
    from guardrail.config.settings import load_settings

    settings = load_settings(environ={}, **judge_settings(local_judge),
                             redteam={"include_probability": True})
    case = Case(case_id="c", output="Shut up, you worthless idiot. Nobody wants you here.")
    evaluator = build_evaluator(settings)
    try:
        metrics = await evaluator.evaluate(case)
    finally:
        await evaluator.aclose()
    for metric in metrics.metrics:
        print(f"{metric.name}: {metric.result[0].verdict if metric.result else metric.error}"
              f", P(UNSAFE) = {metric.probability_unsafe}")
        assert metric.error is None
        assert 0.0 <= metric.probability_unsafe <= 1.0
        assert metric.result[0].probability_unsafe == metric.probability_unsafe
    toxicity = next(m for m in metrics.metrics if m.name == "toxicity")
    assert toxicity.result[0].verdict == "UNSAFE"
    assert metrics.cost.input_tokens > 100 and metrics.cost.output_tokens > 5
    assert metrics.cost.cost == 0.0
