"""Where the compiled kernels are cached, under which key, and how a cache travels as one file.

numba's own on-disk cache (an index per function, `.nbi`, naming one data file of object code per
signature, `.nbc`) is what the kernels load. numba checks, per function, a hash of the function's
own source file, a hash of its bytecode and the target (LLVM triple, CPU name and CPU features:
`CPUCodegen.magic_tuple`) before it loads an entry. It does not check what the function's code
depends on in other files (layout constants, helpers from other modules, compiled into the
caller), nor numba's or llvmlite's exact version for the data files. So every kernel's cache lives
in a directory named by a key (`CacheKey`) of everything the compiled code depends on:

- the numba, llvmlite and Python versions (and the Python build's ABI flags),
- a sha256 of the package's kernel sources (`KERNEL_SOURCES`: every module a kernel is defined
  in or takes a constant or a helper from),
- the target as numba's CPU codegen names it: triple, CPU name, CPU features (honouring
  NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, as numba does).

A process only ever looks in the directory of its own key, `<root>/kernels-<digest>`; a cache of
another CPU, another numba, or older sources sits in another directory and is never read.
`root` is NUMBA_CACHE_DIR, else `$TMPDIR/kafka-compaction-numba` (the process's own temp dir).

A fresh executor (an empty temp dir: a Kubernetes pod, a YARN container) has no such directory;
`runtime/kernel_store.py` brings it from the job's store as one archive (`pack` / `unpack`): a zip
whose `KEY.json` holds the key's parts in clear and the sha256 of each file. `unpack` refuses an
archive whose key differs from this process's in any part, or any file whose bytes do not match.

A corrupt file in the directory itself never breaks a run: a load that fails is a miss (numba
then compiles), a save that fails is skipped (`_KernelCache`). numba writes each file under a
temporary name and renames it: concurrent workers of a host see whole files.

`count_compiles` counts numba's compile events in this process (numba's own
`"numba:compile"` event, sent only when a kernel is compiled, not when it is loaded from the
cache); `KAFKA_COMPACTION_COMPILE_LOG=FILE` (test-only) has each compile appended to FILE as a
line `pid qualname`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import posixpath
import shutil
import socket
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from typing import ClassVar

from numba.core import event
from numba.core.caching import CompileResultCacheImpl, FunctionCache, _Cache, _CacheLocator

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # compaction/
# Paths under the package (directories end with '/') holding every kernel and everything a kernel
# reads at compile time. A kernel defined elsewhere is compiled on every run, never cached
# (`_Locator.from_function`); tests/unit/test_kernel_cache.py checks that none is.
KERNEL_SOURCES = ("kernels/", "format/", "steps/ranges.py")
DIR_PREFIX = "kernels-"
KEY_FILE = "KEY.json"  # inside an archive: the key's parts and the sha256 of every file
COMPILE_LOG_ENV = "KAFKA_COMPACTION_COMPILE_LOG"
_TMP_MARK = ".tmp."  # numba's temporary files, `<name>.tmp.<uid>`, left out of an archive


class CacheRejected(Exception):
    """An archive that is not a cache of this process's key (or is damaged): not used."""


# --- the key -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheKey:
    numba: str
    llvmlite: str
    python: str
    sources: str  # sha256 of the kernel sources
    triple: str
    cpu: str
    features: str

    @property
    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()[:32]

    @property
    def dir_name(self) -> str:
        return DIR_PREFIX + self.digest

    @property
    def archive_name(self) -> str:
        return self.dir_name + ".zip"


def kernel_source_files(package_dir: str = PACKAGE_DIR) -> list[str]:
    """The kernel sources' paths relative to the package, sorted ([] where they are not files on
    disk, e.g. the package imported from inside a zip)."""
    out = []
    for entry in KERNEL_SOURCES:
        path = os.path.join(package_dir, entry)
        if entry.endswith("/"):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                out += [
                    os.path.relpath(os.path.join(root, f), package_dir) for f in files if f.endswith(".py")
                ]
        elif os.path.isfile(path):
            out.append(entry)
    return sorted(p.replace(os.sep, "/") for p in out)


@functools.lru_cache(maxsize=1)
def _package_kernel_files() -> frozenset[str]:
    return frozenset(kernel_source_files())


def sources_digest(package_dir: str = PACKAGE_DIR) -> str:
    digest = hashlib.sha256()
    for rel in kernel_source_files(package_dir):
        with open(os.path.join(package_dir, rel), "rb") as fh:
            digest.update(rel.encode() + b"\0" + fh.read() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def current_key() -> CacheKey:
    """This process's key (computed once: the target is fixed for a process's life)."""
    import llvmlite
    import numba
    from numba.core.registry import cpu_target

    triple, cpu, features = cpu_target.target_context.codegen().magic_tuple()
    python = f"{sys.implementation.cache_tag} {sys.version} {getattr(sys, 'abiflags', '')}"
    return CacheKey(numba.__version__, llvmlite.__version__, python, sources_digest(), triple, cpu, features)


def local_root(environ=os.environ) -> str:
    return environ.get("NUMBA_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "kafka-compaction-numba")


def local_dir(key: CacheKey | None = None) -> str:
    """The directory of `key`'s (default: this process's) compiled kernels on this host."""
    return os.path.join(local_root(), (key or current_key()).dir_name)


# --- numba's cache, in the key's directory -------------------------------------------------------


class _Locator(_CacheLocator):
    """A kernel's cache files go to `<key dir>/<its module's directory under the package>/`."""

    def __init__(self, py_file: str, lineno: int, cache_path: str) -> None:
        self._py_file, self._lineno, self._cache_path = py_file, lineno, cache_path

    def ensure_cache_path(self) -> None:
        os.makedirs(self._cache_path, exist_ok=True)
        tempfile.TemporaryFile(dir=self._cache_path).close()  # writable, or OSError

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        with open(self._py_file, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        rel = os.path.relpath(os.path.abspath(py_file), PACKAGE_DIR).replace(os.sep, "/")
        if rel not in _package_kernel_files():
            return None
        return cls(
            py_file, py_func.__code__.co_firstlineno, os.path.join(local_dir(), posixpath.dirname(rel))
        )


class _Impl(CompileResultCacheImpl):
    _locator_classes: ClassVar = [_Locator]


class _KernelCache(FunctionCache):
    """numba's function cache with `_Locator`; a file that cannot be read or written is a miss."""

    _impl_class = _Impl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception:
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError:
            return  # an unwritable cache dir: the kernel stays compiled in this process only
        except Exception:
            try:
                self.flush()
                super().save_overload(sig, data)
            except Exception:
                return


class LazyKernelCache(_Cache):
    """A dispatcher's cache, resolved at its first compile or load rather than at import: the key
    (the target's CPU, the sources' hash) is computed once per process, when a kernel is first
    needed, after the worker has brought the cache from the store (`runtime/kernel_store.py`).
    Where no cache can be had (the sources are not files on disk), kernels are compiled."""

    def __init__(self, py_func) -> None:
        self._py_func = py_func
        self._cache: _Cache | None = None
        self._tried = False

    def _get(self) -> _Cache | None:
        if not self._tried:
            self._tried = True
            try:
                self._cache = _KernelCache(self._py_func)
            except Exception:
                self._cache = None
        return self._cache

    @property
    def cache_path(self):
        cache = self._get()
        return cache.cache_path if cache else None

    def load_overload(self, sig, target_context):
        cache = self._get()
        return cache.load_overload(sig, target_context) if cache else None

    def save_overload(self, sig, data):
        cache = self._get()
        if cache:
            cache.save_overload(sig, data)

    def enable(self):
        pass

    def disable(self):
        pass

    def flush(self):
        cache = self._get()
        if cache:
            cache.flush()


# --- a cache as one archive ----------------------------------------------------------------------


def cache_files(directory: str) -> list[str]:
    """The files of a key's directory, relative and sorted (numba's temporary files left out)."""
    out = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        out += [os.path.relpath(os.path.join(root, f), directory) for f in files if _TMP_MARK not in f]
    return sorted(p.replace(os.sep, "/") for p in out)


def pack(directory: str, key: CacheKey) -> bytes:
    """The files of `directory` (a cache of `key`) as one archive; b"" when it has none."""
    files = cache_files(directory)
    if not files:
        return b""
    contents = {}
    for rel in files:
        with open(os.path.join(directory, rel), "rb") as fh:
            contents[rel] = fh.read()
    manifest = {
        "key": asdict(key),
        "files": {rel: hashlib.sha256(data).hexdigest() for rel, data in contents.items()},
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr(KEY_FILE, json.dumps(manifest, indent=1, sort_keys=True))
        for rel, data in contents.items():
            zf.writestr(rel, data)
    return out.getvalue()


def unpack(data: bytes, key: CacheKey, directory: str) -> int:
    """Write the archive `data` into `directory` (which must not exist; it appears whole, by
    rename, or not at all: another worker may have made it first). Returns the files written, 0
    when `directory` existed already. CacheRejected when the archive is damaged or of another key."""
    files = verify(data, key)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(directory) + _TMP_MARK, dir=parent)
    try:
        for rel, content in files.items():
            path = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(content)
        try:
            os.rename(tmp, directory)
        except OSError:  # made meanwhile by another worker (or by a compile of this one)
            return 0
        return len(files)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def verify(data: bytes, key: CacheKey) -> dict[str, bytes]:
    """The files of an archive of `key`'s cache, each checked against its sha256 in the manifest."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read(KEY_FILE))
            if manifest.get("key") != asdict(key):
                raise CacheRejected(f"a cache of another key: {manifest.get('key')!r}")
            names = set(zf.namelist()) - {KEY_FILE}
            if names != set(manifest["files"]):
                raise CacheRejected("the archive's files are not the ones its manifest lists")
            files = {}
            for rel, sha in manifest["files"].items():
                parts = rel.split("/")
                if rel.startswith("/") or ".." in parts or "" in parts:
                    raise CacheRejected(f"a file outside the cache: {rel!r}")
                content = zf.read(rel)
                if hashlib.sha256(content).hexdigest() != sha:
                    raise CacheRejected(f"{rel}: its bytes do not match the manifest")
                files[rel] = content
            return files
    except CacheRejected:
        raise
    except Exception as exc:
        raise CacheRejected(f"not a readable cache archive: {exc}") from None


# --- compile events ------------------------------------------------------------------------------


class _CompileCounter(event.Listener):
    def __init__(self, log: str | None) -> None:
        self.by_process: dict[str, int] = {}
        self._log = log

    def on_start(self, ev) -> None:
        pass

    def on_end(self, ev) -> None:
        pid = os.getpid()
        process = f"{socket.gethostname()}/{pid}"
        self.by_process[process] = self.by_process.get(process, 0) + 1
        if self._log:
            name = getattr(ev.data.get("dispatcher"), "__qualname__", "?")
            try:
                with open(self._log, "a") as fh:  # one short append: whole lines from every process
                    fh.write(f"{pid} {name}\n")
            except OSError:
                pass


_counter: _CompileCounter | None = None


def count_compiles() -> None:
    """Count numba's compiles from now on in this process (and the processes forked from it)."""
    global _counter
    if _counter is None:
        _counter = _CompileCounter(os.environ.get(COMPILE_LOG_ENV) or None)
        event.register("numba:compile", _counter)


def compiles() -> dict[str, int]:
    """Compiles counted so far, by the process that compiled (`host/pid`; a forked worker also
    holds those of the process it was forked from)."""
    return dict(_counter.by_process) if _counter is not None else {}
