"""The compiled kernels' cache (compaction/kernels/cache.py) and its store (runtime/kernel_store.py):
a cache is only ever read under its own key (numba, llvmlite and Python versions, the kernel
sources' hash, the CPU's name and features), an archive of another key or a damaged one is not
used, a damaged file in a host's cache costs a compile, never the run, and the store's archive
appears whole.

The subprocess tests run a real kernel in a fresh Python with its own NUMBA_CACHE_DIR and read
numba's own compile events (`KAFKA_COMPACTION_COMPILE_LOG`) to tell a load from a compile."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import pkgutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import compaction
from compaction.kernels import cache
from compaction.kernels.cache import CacheKey, CacheRejected
from compaction.runtime import kernel_store
from compaction.runtime.storage import Storage
from compaction.settings import KERNEL_CACHE_KEEP_SECONDS, KERNEL_CACHE_NAME, Settings, beside
from compaction.spark.warmup import compiled_kernels

REPO = Path(__file__).resolve().parents[2]
KEY = CacheKey(
    "0.68.1", "0.50.0", "cpython-311 3.11.7", "ab" * 32, "x86_64-unknown-linux-gnu", "znver4", "+avx2,+sse4.2"
)

# One small kernel, run in a fresh process: prints the compiles numba made for it there.
RUN_KERNEL = """
import numpy as np
from compaction.kernels import cache
cache.count_compiles()
from compaction.kernels.memops import put_be32
out = np.zeros(4, np.uint8)
put_be32(out, 0, 0x01020304)
assert out.tolist() == [1, 2, 3, 4]
print(sum(cache.compiles().values()), cache.local_dir())
"""


def run_kernel(root: Path, **env) -> tuple[int, Path]:
    full = {"PATH": os.environ["PATH"], "NUMBA_CACHE_DIR": str(root), "PYTHONPATH": str(REPO), **env}
    out = subprocess.run(
        [sys.executable, "-c", RUN_KERNEL], env=full, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    count, directory = out.stdout.split()
    return int(count), Path(directory)


def cache_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.rglob(f"memops.put_be32-*{suffix}"))


# --- the key -------------------------------------------------------------------------------------


@pytest.mark.parametrize("part", [f.name for f in dataclasses.fields(CacheKey)])
def test_every_part_of_the_key_names_another_directory(part):
    other = dataclasses.replace(KEY, **{part: getattr(KEY, part) + "x"})
    assert other.dir_name != KEY.dir_name and other.archive_name != KEY.archive_name


def test_this_process_key_is_numbas_own_target_and_the_kernel_sources():
    import llvmlite
    import numba
    from numba.core.registry import cpu_target

    key = cache.current_key()
    assert (key.triple, key.cpu, key.features) == cpu_target.target_context.codegen().magic_tuple()
    assert (key.numba, key.llvmlite) == (numba.__version__, llvmlite.__version__)
    assert sys.version in key.python
    files = cache.kernel_source_files()
    assert "kernels/scan_kernels.py" in files and "format/layout.py" in files and "steps/ranges.py" in files
    assert key.sources == cache.sources_digest()


def test_an_edit_of_a_kernel_source_changes_the_sources_hash(tmp_path):
    pkg = tmp_path / "compaction"
    for rel in cache.kernel_source_files():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes((Path(compaction.__file__).parent / rel).read_bytes())
    before = cache.sources_digest(str(pkg))
    assert before == cache.sources_digest()
    layout = pkg / "format" / "layout.py"
    layout.write_text(layout.read_text() + "\nEXTRA = 1\n")
    assert cache.sources_digest(str(pkg)) != before


def test_every_kernel_is_cached_under_the_key():
    """Every dispatcher `kernels.jit.njit` made (all modules of the package imported) lives in a
    kernel source file, so its cache is keyed by the sources' hash, not compiled on every run."""
    from compaction.kernels import jit

    for mod in pkgutil.walk_packages(compaction.__path__, "compaction."):
        if not mod.name.startswith(("compaction.airflow", "compaction.__main__")):
            importlib.import_module(mod.name)
    assert len(jit.KERNELS) > 40
    files = set(cache.kernel_source_files())
    for d in jit.KERNELS:
        rel = os.path.relpath(d.py_func.__code__.co_filename, cache.PACKAGE_DIR)
        assert rel in files, f"{d.py_func.__qualname__} is defined in {rel}, outside KERNEL_SOURCES"
        assert isinstance(d._cache, cache.LazyKernelCache)


# --- archives ------------------------------------------------------------------------------------


def make_cache(directory: Path) -> None:
    (directory / "kernels").mkdir(parents=True)
    (directory / "kernels" / "scan_kernels._walk_kernel-10.py311.nbi").write_bytes(b"index")
    (directory / "kernels" / "scan_kernels._walk_kernel-10.py311.1.nbc").write_bytes(b"\x00object code" * 100)
    (directory / "kernels" / "scan_kernels._walk_kernel-10.py311.nbi.tmp.0123").write_bytes(b"half")


def test_an_archive_unpacks_to_the_same_files_without_numbas_temporary_ones(tmp_path):
    make_cache(tmp_path / "a")
    data = cache.pack(str(tmp_path / "a"), KEY)
    assert cache.unpack(data, KEY, str(tmp_path / "b")) == 2
    assert cache.cache_files(str(tmp_path / "b")) == cache.cache_files(str(tmp_path / "a"))
    assert len(cache.cache_files(str(tmp_path / "a"))) == 2
    for rel in cache.cache_files(str(tmp_path / "a")):
        assert (tmp_path / "b" / rel).read_bytes() == (tmp_path / "a" / rel).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no temporary dir left
    assert cache.unpack(data, KEY, str(tmp_path / "b")) == 0  # there already: left as it is


@pytest.mark.parametrize(
    "part, value",
    [
        ("cpu", "skylake-avx512"),
        ("features", "+avx2,-sse4.2"),
        ("sources", "cd" * 32),
        ("numba", "0.61.0"),
        ("python", "cpython-312"),
    ],
)
def test_an_archive_of_another_key_is_not_used(tmp_path, part, value):
    make_cache(tmp_path / "a")
    foreign = dataclasses.replace(KEY, **{part: value})
    data = cache.pack(str(tmp_path / "a"), foreign)
    with pytest.raises(CacheRejected, match="another key"):
        cache.unpack(data, KEY, str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()


def _rezip(data: bytes, change) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    change(entries)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, content in entries.items():
            zf.writestr(name, content)
    return out.getvalue()


def _flip_object_code(entries):
    name = next(n for n in entries if n.endswith(".nbc"))
    entries[name] = entries[name][:-1] + b"\x01"


def _add_file(entries):
    entries["kernels/extra.nbc"] = b"x"


def _escape(entries):
    manifest = json.loads(entries[cache.KEY_FILE])
    name = next(n for n in entries if n.endswith(".nbi"))
    manifest["files"]["../evil.nbi"] = manifest["files"].pop(name)
    entries["../evil.nbi"] = entries.pop(name)
    entries[cache.KEY_FILE] = json.dumps(manifest).encode()


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[: len(d) // 2],  # truncated
        lambda d: d[:200] + bytes([d[200] ^ 0xFF]) + d[201:],  # a flipped byte (CRC or deflate stream)
        lambda d: b"not a zip at all",
        lambda d: _rezip(d, _flip_object_code),  # a file whose bytes differ from the manifest's sha256
        lambda d: _rezip(d, _add_file),  # a file the manifest does not list
        lambda d: _rezip(d, lambda e: e.pop(cache.KEY_FILE)),  # no manifest
        lambda d: _rezip(d, _escape),  # a path out of the cache dir
    ],
    ids=["truncated", "flipped-byte", "not-zip", "bad-sha", "unlisted-file", "no-manifest", "escape"],
)
def test_a_damaged_archive_is_not_used(tmp_path, damage):
    make_cache(tmp_path / "a")
    data = damage(cache.pack(str(tmp_path / "a"), KEY))
    with pytest.raises(CacheRejected):
        cache.unpack(data, KEY, str(tmp_path / "b"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


# --- the store -----------------------------------------------------------------------------------


def test_publish_then_fetch_on_a_fresh_host(tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "host-a"))
    make_cache(Path(cache.local_dir()))
    assert kernel_store.publish(str(store), compiled=False) == "written"
    assert kernel_store.publish(str(store), compiled=False) == "present"
    archive = store / cache.current_key().archive_name
    assert [p.name for p in store.iterdir()] == [archive.name]  # no temporary file left
    assert oct(archive.stat().st_mode & 0o777) == "0o644"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "host-b"))
    kernel_store._fetched.clear()
    assert kernel_store.fetch(str(store)) == "fetched"
    assert cache.cache_files(cache.local_dir()) == cache.cache_files(
        str(tmp_path / "host-a" / cache.current_key().dir_name)
    )
    assert kernel_store.fetch(str(store)) == "local"


def test_publishing_a_new_key_prunes_only_the_stores_old_files(tmp_path, monkeypatch):
    store = tmp_path / "store"
    store.mkdir()
    day = 24 * 3600
    old = time.time() - KERNEL_CACHE_KEEP_SECONDS - day
    names = {
        "kernels-00aa.zip": old,  # another key, untouched past the limit: removed
        "kernels-00bb.zip.tmp.a1b2c3": old,  # a killed writer's leftover: removed
        "kernels-00cc.zip": time.time() - day,  # another key in use lately: kept
        "notes.txt": old,  # not the store's own: kept
        "kernels-00dd.zip.bak": old,  # not a name the store writes: kept
    }
    for name, mtime in names.items():
        (store / name).write_bytes(b"x")
        os.utime(store / name, (mtime, mtime))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "host"))
    make_cache(Path(cache.local_dir()))
    assert kernel_store.publish(str(store), compiled=False) == "written"
    own = cache.current_key().archive_name
    assert sorted(p.name for p in store.iterdir()) == sorted(
        ["kernels-00cc.zip", "notes.txt", "kernels-00dd.zip.bak", own]
    )
    os.utime(store / own, (old, old))  # this key's own archive is never pruned, however old
    assert kernel_store.prune(Storage.local(), str(store), cache.current_key()) == []


def test_a_damaged_archive_on_the_store_is_not_fetched(tmp_path, monkeypatch):
    store = tmp_path / "store"
    store.mkdir()
    (store / cache.current_key().archive_name).write_bytes(b"PK\x03\x04 half an archive")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "host"))
    kernel_store._fetched.clear()
    assert kernel_store.fetch(str(store)).startswith("rejected")
    assert not os.path.exists(cache.local_dir())
    assert kernel_store.fetch(str(store)) == "tried"  # not read again by the next task


def test_no_store_and_an_unreachable_one_are_no_error(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "host"))
    kernel_store._fetched.clear()
    assert kernel_store.fetch("off") == kernel_store.fetch(None) == "off"
    assert kernel_store.fetch(str(tmp_path / "none")) == "absent"
    blocker = tmp_path / "file"
    blocker.write_text("")
    make_cache(Path(cache.local_dir()))
    assert kernel_store.publish(str(blocker / "store"), compiled=True).startswith("failed")


@pytest.mark.parametrize(
    "log_dir, expected",
    [
        ("/data/kafka-logs", "/data/" + KERNEL_CACHE_NAME),
        ("/data/kafka-logs/", "/data/" + KERNEL_CACHE_NAME),
        ("s3://bucket/logs?region=eu-west-1", f"s3://bucket/{KERNEL_CACHE_NAME}?region=eu-west-1"),
        ("s3://bucket/a/logs/", f"s3://bucket/a/{KERNEL_CACHE_NAME}"),
    ],
)
def test_the_default_store_is_beside_the_first_log_dir(log_dir, expected):
    assert beside(log_dir, KERNEL_CACHE_NAME) == expected


def test_the_store_setting(tmp_path):
    from compaction.cli.options import parse_args

    args = parse_args(["--log-dir", str(tmp_path / "logs"), "--log-dir", "/elsewhere/logs"])
    assert Settings.resolve(args, None, {}).worker.kernel_cache_dir == str(tmp_path / KERNEL_CACHE_NAME)
    conf = {"spark.kafka.compaction.kernelCacheDir": "s3://b/kernels"}
    assert Settings.resolve(args, conf, {}).worker.kernel_cache_dir == "s3://b/kernels"
    off = Settings.resolve(args, None, {"KAFKA_COMPACTION_KERNEL_CACHE_DIR": "off"}).worker.kernel_cache_dir
    assert not kernel_store.enabled(off)


def test_compiles_are_counted_once_per_process():
    # the daemon's compiles (host/1) appear in each worker forked from it
    assert compiled_kernels([{"h/1": 100, "h/2": 3}, {"h/1": 100, "h/3": 0}, {"g/1": 7}]) == 110
    assert compiled_kernels([{}, {}]) == 0


# --- a host's cache, with numba ------------------------------------------------------------------


def test_a_second_process_loads_the_kernel_instead_of_compiling(tmp_path):
    assert run_kernel(tmp_path)[0] > 0
    assert run_kernel(tmp_path)[0] == 0


def test_a_cache_of_another_cpu_is_not_read(tmp_path):
    """NUMBA_CPU_NAME / NUMBA_CPU_FEATURES stand for another machine: its key, its directory."""
    compiled, here = run_kernel(tmp_path)
    assert compiled > 0
    other, there = run_kernel(tmp_path, NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="+64bit,+sse,+sse2")
    assert other > 0 and there != here
    assert run_kernel(tmp_path)[0] == 0  # this CPU's cache untouched


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_a_damaged_file_in_the_hosts_cache_costs_a_compile_not_the_run(tmp_path, suffix):
    _, directory = run_kernel(tmp_path)
    assert cache_files(directory, suffix)
    for path in cache_files(directory, suffix):
        path.write_bytes(path.read_bytes()[:20] + b"\xff" * 40)
    assert run_kernel(tmp_path)[0] > 0  # compiled again, and the damaged file replaced:
    assert run_kernel(tmp_path)[0] == 0
