"""The files through which the tasks of one ranges stage hand each other their blocks.

The tasks of that stage are ordinary Spark tasks: each writes its blocks (`Block`, their kinds in steps/ranges.py) into
files of a directory that every task can reach, posts a marker when a phase is done, and waits for
every task's marker before it reads what the others wrote. The blocks never pass through the JVM:
a file is written once by one task and read, slice by slice, by the tasks that need it.

Nothing guarantees that the stage's tasks run at the same time (a lost executor, dynamic
allocation, fewer slots than the plan expected), so a wait never outlasts its peer: every task
beats a heart (`alive-<task>`, rewritten every HEARTBEAT_SECONDS) while it runs, and says
`gone-<task>` when it stops before its last phase. A waiting task gives up (`PeerGone`) when the
peer it waits for is gone, or its heart has not beaten for `peer_wait` seconds (dead, or not
started yet: its slot may be the one the waiter holds). What the stage's tasks leave undone, the
driver then runs as further stages that wait for nothing (compaction/steps/range_task.py).

Layout of the directory:

    <name>.blocks   block payloads back to back, then the index, then its length:
                    [data 0][data 1]...[index: Arrow IPC stream (range_id int32, kind int32,
                    bucket int32, seq int64, offset int64, length int64)][index length: u64 LE]
    done-<phase>-<task>.json   the task's status of that phase (written last, after its files)
    alive-<task>, gone-<task>  the task's heartbeat, and its word that it stopped early

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
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from compaction.errors import ExchangeError
from compaction.runtime.storage import Storage
from compaction.settings import PEER_WAIT_SECONDS

INDEX_LENGTH = struct.Struct("<Q")  # the trailer: length of the index stream
_INDEX = pa.schema(
    [
        pa.field("range_id", pa.int32()),
        pa.field("kind", pa.int32()),
        pa.field("bucket", pa.int32()),
        pa.field("seq", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("length", pa.int64()),
    ]
)
PREFIX = ".kafka-compaction-exchange-"
# How often a waiting task looks for the others' markers: a local directory costs a stat, an
# object store a request.
POLL_LOCAL_SECONDS, POLL_REMOTE_SECONDS = 0.002, 0.05
# How often a running task rewrites its heartbeat file, and how often a waiting task looks at
# its peer's (an object store answers one request each).
HEARTBEAT_SECONDS = 1.0


class Block(NamedTuple):
    """One unit of the exchange. `range_id`: the range's id (`steps/schedule.py` `RangePlan`);
    `kind`: what it holds (`steps/ranges.py` SUMMARY, IDS, ...); `bucket`: the merge bucket of a
    SUMMARY block, else -1; `seq` orders a range's blocks of one kind (segment index for IDS,
    first id for LATEST); `data`: the block's bytes (an Arrow buffer as `to_block` makes it,
    bytes as the exchange reads it back)."""

    range_id: int
    kind: int
    bucket: int
    seq: int
    data: pa.Buffer | bytes


def to_block(**columns) -> pa.Buffer:
    """The columns as one record batch in an Arrow IPC stream, in Arrow's buffer (not copied into
    Python bytes: a range's summaries are tens of MB, written to the exchange once)."""
    batch = pa.RecordBatch.from_pydict(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def from_block(data: pa.Buffer | bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


class PeerGone(BaseException):
    """The peer a task waits for is gone or not running: the task stops where it is and leaves the
    rest to the driver's follow-up stages. A BaseException, so that the handlers that turn a
    partition's error into its failed rows (`except Exception`) let it through: nothing failed."""

    def __init__(self, task: int, phase: str) -> None:
        super().__init__(f"task {task} did not finish phase {phase}")
        self.task, self.phase = task, phase


class Exchange:
    """The exchange directory of one stage (picklable: tasks receive it in their closure)."""

    def __init__(self, storage: Storage, root: str, peer_wait: float = PEER_WAIT_SECONDS) -> None:
        self.storage, self.root = storage, root
        self.peer_wait = peer_wait  # 0: never wait (the driver's follow-up stages: all is there)

    @classmethod
    def create(
        cls, configured: str | None, local_master: bool, log_dir: str, peer_wait: float = PEER_WAIT_SECONDS
    ) -> Exchange:
        """The stage's directory (see the module docstring), created empty."""
        if configured:
            storage, base = Storage.for_uri(configured)
            root = f"{base.rstrip('/')}/{PREFIX}{uuid.uuid4().hex[:12]}"
        elif local_master:
            storage, root = Storage.local(), tempfile.mkdtemp(prefix=PREFIX)
            return cls(storage, root, peer_wait=peer_wait)
        else:
            storage, base = Storage.for_uri(log_dir)
            root = f"{os.path.dirname(base.rstrip('/'))}/{PREFIX}{uuid.uuid4().hex[:12]}"
        if storage.is_local:
            os.makedirs(root, exist_ok=True)
        return cls(storage, root, peer_wait=peer_wait)

    def no_wait(self) -> Exchange:
        """The same directory for tasks that must find every marker they read already there."""
        return Exchange(self.storage, self.root, peer_wait=0)

    def remove(self) -> None:
        if self.storage.is_local:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        # Object by object through the storage layer: on S3 that leaves no directory marker.
        try:
            infos = self.storage.fs.get_file_info(
                pafs.FileSelector(self.root, allow_not_found=True, recursive=True)
            )
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
            try:
                with self.storage.fs.open_output_stream(path, compression=None) as out:
                    yield out
            except BaseException:
                # Leaving the `with` closed the stream, which completes the upload of what was
                # written: the part of a file, which a retry's `exists` would take for the file.
                self.storage.delete(path, missing_ok=True)
                raise
            return
        os.makedirs(self.root, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        with open(tmp, "wb") as out:
            yield out
        os.replace(tmp, path)

    def write_blocks(self, name: str, blocks: Iterable) -> int:
        """Write `blocks` as one file; returns its size."""
        index = {f.name: [] for f in _INDEX}
        at = 0
        with self._create(name) as out:
            for b in blocks:
                out.write(b.data)
                for k, v in (
                    ("range_id", b.range_id),
                    ("kind", b.kind),
                    ("bucket", b.bucket),
                    ("seq", b.seq),
                    ("offset", at),
                    ("length", len(b.data)),
                ):
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
                at = size - INDEX_LENGTH.size
                (n,) = INDEX_LENGTH.unpack(f.read_at(INDEX_LENGTH.size, at))
                if n > at:  # a damaged trailer: reading it would ask for bytes the file does not hold
                    raise ExchangeError(
                        f"cannot read the exchange file {path}: the trailer at byte {at} gives an index"
                        f" of {n} bytes, more than the {at} before it"
                    )
                raw = f.read_at(n, at - n)
            table = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
        except (OSError, struct.error, pa.ArrowInvalid) as exc:  # missing, cut short, or its index damaged
            raise ExchangeError(f"cannot read the exchange file {path}: {exc}") from exc
        return {f.name: table.column(f.name).to_numpy() for f in _INDEX}

    def read_blocks(self, name: str, select=None, index: dict | None = None) -> Iterator:
        """The file's blocks (those whose index row `select(index)` marks, when given), in order;
        `index`: the file's `read_index`, when the caller has it already."""
        index = self.read_index(name) if index is None else index
        rows = np.flatnonzero(select(index)) if select is not None else np.arange(len(index["offset"]))
        if not len(rows):
            return
        with self.storage.open_input(self.path(name)) as f:
            for i in rows.tolist():
                data = f.read_at(int(index["length"][i]), int(index["offset"][i]))
                yield Block(
                    int(index["range_id"][i]),
                    int(index["kind"][i]),
                    int(index["bucket"][i]),
                    int(index["seq"][i]),
                    bytes(data),
                )

    # --- phases --------------------------------------------------------------------------

    def post(self, phase: str, task: int, status: dict) -> None:
        """Mark the task's `phase` done (after every file of that phase is written)."""
        with self._create(f"done-{phase}-{task}.json") as out:
            out.write(json.dumps(status).encode())

    def gather(self, phase: str, tasks: int) -> list[dict]:
        """Every task's status of `phase`, once all are posted (waits)."""
        return [self.status(phase, t) for t in range(tasks)]

    def posted(self, phase: str, task: int) -> bool:
        return self.storage.exists(self.path(f"done-{phase}-{task}.json"))

    def status(self, phase: str, task: int) -> dict:
        """The task's status of `phase`, once posted: waits while the task is alive (see the
        module docstring), else raises `PeerGone` (at once when `peer_wait` is 0)."""
        poll = POLL_LOCAL_SECONDS if self.storage.is_local else POLL_REMOTE_SECONDS
        path = self.path(f"done-{phase}-{task}.json")
        pulse = _Pulse(self, task)
        while not self.storage.exists(path):
            if not pulse.alive():
                raise PeerGone(task, phase)
            time.sleep(poll)
        return json.loads(self.storage.read_bytes(path))

    # --- liveness --------------------------------------------------------------------------

    @contextmanager
    def heartbeat(self, task: int):
        """Beat the task's heart while the block runs; a block left by `PeerGone` says `gone`."""
        stop = threading.Event()

        def beat() -> None:
            n = 0
            while True:
                try:
                    with self._create(f"alive-{task}") as out:  # a new file: its mtime and size change
                        out.write(str(n).encode())
                except OSError:
                    pass  # a missed beat: the next one may land
                n += 1
                if stop.wait(HEARTBEAT_SECONDS):
                    return

        thread = threading.Thread(target=beat, name=f"exchange-heartbeat-{task}", daemon=True)
        thread.start()
        try:
            yield
        except PeerGone:
            with self._create(f"gone-{task}") as out:
                out.write(b"")
            raise
        finally:
            stop.set()
            thread.join()


class _Pulse:
    """Whether a peer is worth waiting for: not gone, and its heartbeat file changed within the
    last `peer_wait` seconds of this host's clock (the file's own mtime comes from the peer's host
    or the store, whose clocks may differ: only its changes are compared)."""

    def __init__(self, ex: Exchange, task: int) -> None:
        self.ex, self.task = ex, task
        self.seen, self.since, self.checked = None, time.monotonic(), 0.0

    def alive(self) -> bool:
        if self.ex.peer_wait <= 0:
            return False
        now = time.monotonic()
        # A local directory answers a stat at once; an object store is asked once a beat.
        if now - self.checked < HEARTBEAT_SECONDS / (4 if self.ex.storage.is_local else 1):
            return True
        self.checked = now
        if self.ex.storage.exists(self.ex.path(f"gone-{self.task}")):
            return False
        info = self.ex.storage.fs.get_file_info(self.ex.path(f"alive-{self.task}"))
        beat = None if info.type == pafs.FileType.NotFound else (info.mtime_ns, info.size)
        if beat != self.seen:
            self.seen, self.since = beat, now
        return now - self.since < self.ex.peer_wait


__all__ = ["PREFIX", "Exchange", "ExchangeError", "PeerGone"]
