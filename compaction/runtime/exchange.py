"""The files through which the tasks of one ranges stage hand each other their blocks.

The tasks of that stage run at the same time (a Spark barrier stage: all or none), so a task can
wait for the others. Each writes its blocks (`ranges.Block`) into files of a directory that every
task can reach, posts a marker when a phase is done, and waits for every task's marker before it
reads what the others wrote. The blocks never pass through the JVM: a file is written once by one
task and read, slice by slice, by the tasks that need it.

Layout of the directory:

    <name>.blocks   block payloads back to back, then the index, then its length:
                    [data 0][data 1]...[index: Arrow IPC stream (range_id int32, kind int32,
                    bucket int32, seq int64, offset int64, length int64)][index length: u64 LE]
    done-<phase>-<task>.json   the task's status of that phase (written last, after its files)

Where: `spark.kafka.compaction.exchangeDir` when set; otherwise a temporary directory on the
driver's host when Spark runs in local mode (every task on this host), else a directory beside the
first log dir (`.kafka-compaction-exchange-<id>`, on the same store, which every executor reads).
The driver removes it after the stage.

A file appears whole or not at all (renamed into place; an object store's upload completes), and
what a task writes is a function of its input only: when Spark runs the stage again after a task
died, a file or marker left by the first attempt says the same as the one the second writes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
import uuid
from contextlib import contextmanager
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from compaction.errors import CompactionError
from compaction.runtime.storage import Storage

INDEX_LENGTH = struct.Struct("<Q")  # the trailer: length of the index stream
_INDEX = pa.schema([pa.field("range_id", pa.int32()), pa.field("kind", pa.int32()), pa.field("bucket", pa.int32()),
                    pa.field("seq", pa.int64()), pa.field("offset", pa.int64()),
                    pa.field("length", pa.int64())])  # fmt: skip
PREFIX = ".kafka-compaction-exchange-"
# How often a waiting task looks for the others' markers: a local directory costs a stat, an
# object store a request.
POLL_LOCAL_SECONDS, POLL_REMOTE_SECONDS = 0.002, 0.05


class ExchangeError(CompactionError):
    """A peer's file or marker is missing or unreadable."""


class Exchange:
    """The exchange directory of one stage (picklable: tasks receive it in their closure)."""

    def __init__(self, storage: Storage, root: str, local_temp: bool = False) -> None:
        self.storage, self.root, self._local_temp = storage, root, local_temp
        self.timeout = 24 * 3600.0  # a dead peer fails the barrier stage well before this

    @classmethod
    def create(cls, configured: str | None, local_master: bool, log_dir: str) -> Exchange:
        """The stage's directory (see the module docstring), created empty."""
        if configured:
            storage, base = Storage.for_uri(configured)
            root = f"{base.rstrip('/')}/{PREFIX}{uuid.uuid4().hex[:12]}"
        elif local_master:
            storage, root = Storage.local(), tempfile.mkdtemp(prefix=PREFIX)
            return cls(storage, root, local_temp=True)
        else:
            storage, base = Storage.for_uri(log_dir)
            root = f"{os.path.dirname(base.rstrip('/'))}/{PREFIX}{uuid.uuid4().hex[:12]}"
        if storage.is_local:
            os.makedirs(root, exist_ok=True)
        return cls(storage, root)

    def remove(self) -> None:
        if self.storage.is_local:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        # Object by object through the storage layer: on S3 that leaves no directory marker.
        try:
            infos = self.storage.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True, recursive=True))
            for info in infos:
                if info.type == pafs.FileType.File:
                    self.storage.delete(info.path, missing_ok=True)
        except OSError:
            pass  # a best effort: the directory holds nothing a later run reads

    def __enter__(self) -> Exchange:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    # --- files of blocks -----------------------------------------------------------------

    def path(self, name: str) -> str:
        """Where the stage's file `name` goes."""
        return f"{self.root}/{name}"

    @contextmanager
    def _create(self, name: str):
        """An output stream whose file appears, whole, when it closes."""
        path = self.path(name)
        if not self.storage.is_local:  # an object appears whole when its upload completes
            with self.storage.fs.open_output_stream(path, compression=None) as out:
                yield out
            return
        os.makedirs(self.root, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        with open(tmp, "wb") as out:
            yield out
        os.replace(tmp, path)

    def write_blocks(self, name: str, blocks: Iterable) -> int:
        """Write `blocks` (ranges.Block) as one file; returns its size."""
        index = {f.name: [] for f in _INDEX}
        at = 0
        with self._create(name) as out:
            for b in blocks:
                out.write(b.data)
                for k, v in (("range_id", b.range_id), ("kind", b.kind), ("bucket", b.bucket), ("seq", b.seq),
                             ("offset", at), ("length", len(b.data))):  # fmt: skip
                    index[k].append(v)
                at += len(b.data)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, _INDEX) as writer:
                writer.write_batch(pa.RecordBatch.from_pydict(index, schema=_INDEX))
            tail = sink.getvalue()
            out.write(tail)
            out.write(INDEX_LENGTH.pack(len(tail)))
        return at + len(tail) + INDEX_LENGTH.size

    def read_index(self, name: str) -> dict[str, np.ndarray]:
        path = self.path(name)
        try:
            with self.storage.open_input(path) as f:
                size = f.size()
                (n,) = INDEX_LENGTH.unpack(f.read_at(INDEX_LENGTH.size, size - INDEX_LENGTH.size))
                raw = f.read_at(n, size - INDEX_LENGTH.size - n)
        except (OSError, struct.error) as exc:
            raise ExchangeError(f"cannot read the exchange file {path}: {exc}") from exc
        table = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
        return {f.name: table.column(f.name).to_numpy() for f in _INDEX}

    def read_blocks(self, name: str, select=None, index: dict | None = None) -> Iterator:
        """The file's blocks (those whose index row `select(index)` marks, when given), in order;
        `index`: the file's `read_index`, when the caller has it already."""
        from compaction.steps.ranges import Block

        index = self.read_index(name) if index is None else index
        rows = np.flatnonzero(select(index)) if select is not None else np.arange(len(index["offset"]))
        if not len(rows):
            return
        with self.storage.open_input(self.path(name)) as f:
            for i in rows.tolist():
                data = f.read_at(int(index["length"][i]), int(index["offset"][i]))
                yield Block(int(index["range_id"][i]), int(index["kind"][i]), int(index["bucket"][i]),
                            int(index["seq"][i]), bytes(data))  # fmt: skip

    # --- phases --------------------------------------------------------------------------

    def post(self, phase: str, task: int, status: dict) -> None:
        """Mark the task's `phase` done (after every file of that phase is written)."""
        with self._create(f"done-{phase}-{task}.json") as out:
            out.write(json.dumps(status).encode())

    def gather(self, phase: str, tasks: int) -> list[dict]:
        """Every task's status of `phase`, once all are posted (waits)."""
        return [self.status(phase, t) for t in range(tasks)]

    def status(self, phase: str, task: int) -> dict:
        """The task's status of `phase`, once posted (waits)."""
        poll = POLL_LOCAL_SECONDS if self.storage.is_local else POLL_REMOTE_SECONDS
        path = self.path(f"done-{phase}-{task}.json")
        deadline = time.monotonic() + self.timeout
        while not self.storage.exists(path):
            if time.monotonic() > deadline:
                raise ExchangeError(f"task {task} did not finish phase {phase} within {self.timeout:.0f} s")
            time.sleep(poll)
        return json.loads(self.storage.read_bytes(path))

__all__ = ["Exchange", "ExchangeError", "PREFIX"]
