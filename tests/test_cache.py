"""gen's compile cache (cuvil_mcu/cache.py): a second gen of the same model
into another folder replays the stored files byte for byte; a corrupt or
foreign entry is ignored and replaced; --no-cache and CUVIL_CACHE_DIR do what
they say. (The < 0.5 s wall-time goal is measured by
benchmarks/cache_timing.py, not asserted here.)"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from deploy_helpers import ROOT, cli, fails_cleanly, gen

MODEL = ROOT / "examples" / "kws_float.onnx"


def tree(d: Path) -> dict[str, bytes]:
    """The files gen wrote (its manifest, which names the --plan-out file, aside)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".cuvil-mcu-files"}


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "gen").iterdir() if not p.name.startswith(".")) \
        if (cache / "gen").is_dir() else []


def test_second_gen_replays_identical_files(tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    args = [MODEL, "--board", "qemu-mps2-an386", "--name", "kws", "--plan-out"]
    first = gen(*args, tmp_path / "p1.json", "-o", tmp_path / "a", env=env)
    assert len(entries(tmp_path / "cache")) == 1
    second = gen(*args, tmp_path / "p2.json", "-o", tmp_path / "b", env=env)
    fresh = gen(*args, tmp_path / "p3.json", "-o", tmp_path / "c", "--no-cache", env=env)
    assert tree(tmp_path / "a") == tree(tmp_path / "b") == tree(tmp_path / "c")
    assert len(tree(tmp_path / "a")) > 3  # header + the firmware project of a QEMU board
    assert (tmp_path / "p1.json").read_bytes() == (tmp_path / "p2.json").read_bytes() \
        == (tmp_path / "p3.json").read_bytes()
    assert second.stdout.replace("/b/", "/a/").replace("p2.json", "p1.json") == first.stdout
    assert fresh.stdout.replace("/c/", "/a/").replace("p3.json", "p1.json") == first.stdout


def _rewrite(entry: Path, index: int, data: bytes, fix_hash: bool):
    (entry / f"f{index}").write_bytes(data)
    if fix_hash:
        m = json.loads((entry / "manifest.json").read_text())
        m["files"][index].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        (entry / "manifest.json").write_text(json.dumps(m))


def test_a_hit_serves_the_entry_and_a_corrupt_one_is_ignored(tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    gen(MODEL, "-o", tmp_path / "a", env=env)
    good = (tmp_path / "a" / "model.h").read_bytes()
    (entry,) = entries(tmp_path / "cache")
    m = json.loads((entry / "manifest.json").read_text())
    hi = next(i for i, f in enumerate(m["files"]) if f["path"] == "model.h")
    # A consistent entry is trusted: what gen writes comes from the cache.
    _rewrite(entry, hi, good + b"/* from the cache */\n", fix_hash=True)
    gen(MODEL, "-o", tmp_path / "b", env=env)
    assert (tmp_path / "b" / "model.h").read_bytes().endswith(b"/* from the cache */\n")
    # Bytes that no longer match their hash: ignored, recompiled, replaced.
    _rewrite(entry, hi, good[:1000], fix_hash=False)
    gen(MODEL, "-o", tmp_path / "c", env=env)
    assert (tmp_path / "c" / "model.h").read_bytes() == good
    assert (entry / f"f{hi}").read_bytes() == good
    # A foreign entry (its manifest names another key) and a garbage manifest.
    m = json.loads((entry / "manifest.json").read_text())
    m["key"] = "0" * 64
    (entry / "manifest.json").write_text(json.dumps(m))
    gen(MODEL, "-o", tmp_path / "d", env=env)
    assert (tmp_path / "d" / "model.h").read_bytes() == good
    (entry / "manifest.json").write_bytes(b"\x00not json")
    gen(MODEL, "-o", tmp_path / "e", env=env)
    assert (tmp_path / "e" / "model.h").read_bytes() == good
    assert json.loads((entry / "manifest.json").read_text())["key"] == entry.name


def test_key_covers_options_and_no_cache_writes_nothing(tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    gen(MODEL, "-o", tmp_path / "a", "--no-cache", env=env)
    assert entries(tmp_path / "cache") == []
    gen(MODEL, "-o", tmp_path / "a", env=env)
    gen(MODEL, "-o", tmp_path / "b", "--name", "kws", env=env)
    assert (tmp_path / "b" / "kws.h").exists() and not (tmp_path / "b" / "model.h").exists()
    gen(MODEL, "-o", tmp_path / "c", "--weights", "separate", env=env)
    assert (tmp_path / "c" / "model.weights.bin").exists()
    assert len(entries(tmp_path / "cache")) == 3


def test_failed_gen_caches_nothing(tmp_path):
    env = {"CUVIL_CACHE_DIR": str(tmp_path / "cache")}
    fails_cleanly(cli("gen", MODEL, "--board", "qemu-mps2-an385", "--planner", "nonsense",
                      "-o", tmp_path / "x", env=env), tmp_path / "x")
    assert entries(tmp_path / "cache") == []
