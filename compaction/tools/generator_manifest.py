"""What `generate_log_dir` wrote, record by record: the oracle for end-to-end tests.

`PartitionManifest` exposes the plan's columns indexed by offset (row i is offset i, markers
included): `key_id` (-1 for markers), `value_len` (-1 = tombstone), `timestamp`, `producer_id`,
`producer_epoch`, `sequence`, `txn` (TXN_NONE / TXN_COMMITTED / TXN_ABORTED; a marker carries the
outcome it records), `control_type` (-1 data, 0 ABORT, 1 COMMIT), `coordinator_epoch`, `batch`.
`key(o)`, `value(o)`, `headers(o)` and `record(o)` rebuild the exact bytes from the columns and
the shared value pool, so a manifest for 1 GB of data stays a few arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from compaction.format.batch import control_record
from compaction.format.txnindex import AbortedTxn
from compaction.tools.generator_plan import (
    HEADER_VALUE_SIZE,
    GeneratedPartition,
    GenerateOptions,
    header_name,
    key_bytes,
)

RECORD_COLUMNS = (
    "timestamp",
    "key_id",
    "value_pos",
    "value_len",
    "producer_id",
    "producer_epoch",
    "sequence",
    "txn",
    "control_type",
    "coordinator_epoch",
    "batch",
)


class SegmentInfo(NamedTuple):
    base_offset: int
    size: int
    batches: int
    next_offset: int  # first offset after the segment's last batch
    has_txn_index: bool


class ManifestRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    producer_id: int
    producer_epoch: int
    sequence: int
    txn: int  # TXN_NONE / TXN_COMMITTED / TXN_ABORTED
    control_type: int  # -1 for data; 0 ABORT / 1 COMMIT for markers


@dataclass
class PartitionManifest:
    """Everything written to one partition. Column arrays are indexed by offset (row i = offset i)."""

    topic: str
    partition: int
    plan: GeneratedPartition
    pool: np.ndarray
    key_size: int
    headers_per_record: int
    segments: list[SegmentInfo] = field(default_factory=list)
    _summary: dict | None = None  # set by drop_records()

    def __getattr__(self, name: str):  # columns straight from the plan: manifest.key_id, .txn, ...
        if name in RECORD_COLUMNS or name == "offset":
            return getattr(self.plan, name)
        raise AttributeError(name)

    @property
    def log_end_offset(self) -> int:
        return self.plan.log_end_offset if self.plan is not None else self._summary["logEndOffset"]

    def drop_records(self) -> None:
        """Keep only the summary: the CLI does not need per-record columns (~90 bytes a record)."""
        self._summary = self.summary()
        self.plan = None

    @property
    def aborted(self) -> list[AbortedTxn]:
        return [AbortedTxn(*a) for a in self.plan.aborted]

    @property
    def is_control(self) -> np.ndarray:
        return self.plan.control_type >= 0

    @property
    def is_tombstone(self) -> np.ndarray:
        return (self.plan.value_len < 0) & ~self.is_control

    def key(self, offset: int) -> bytes | None:
        if self.plan.control_type[offset] >= 0:
            return self._marker(offset)[0]
        return key_bytes(int(self.plan.key_id[offset]), self.key_size)

    def value(self, offset: int) -> bytes | None:
        if self.plan.control_type[offset] >= 0:
            return self._marker(offset)[1]
        length = int(self.plan.value_len[offset])
        if length < 0:
            return None
        pos = int(self.plan.value_pos[offset])
        return self.pool[pos : pos + length].tobytes()

    def _marker(self, offset: int) -> tuple[bytes, bytes]:
        return control_record(int(self.plan.control_type[offset]), int(self.plan.coordinator_epoch[offset]))

    def headers(self, offset: int) -> tuple[tuple[str, bytes], ...]:
        if self.plan.control_type[offset] >= 0:
            return ()
        pos = int(self.plan.value_pos[offset])
        return tuple(
            (header_name(j), self.pool[pos + j : pos + j + HEADER_VALUE_SIZE].tobytes())
            for j in range(self.headers_per_record)
        )

    def record(self, offset: int) -> ManifestRecord:
        p = self.plan
        return ManifestRecord(
            offset,
            int(p.timestamp[offset]),
            self.key(offset),
            self.value(offset),
            self.headers(offset),
            int(p.producer_id[offset]),
            int(p.producer_epoch[offset]),
            int(p.sequence[offset]),
            int(p.txn[offset]),
            int(p.control_type[offset]),
        )

    def records(self) -> Iterator[ManifestRecord]:
        return (self.record(i) for i in range(self.log_end_offset))

    def summary(self) -> dict:
        if self._summary is not None:
            return self._summary
        return {
            "topic": self.topic,
            "partition": self.partition,
            "logEndOffset": self.log_end_offset,
            "records": int((~self.is_control).sum()),
            "markers": int(self.is_control.sum()),
            "tombstones": int(self.is_tombstone.sum()),
            "abortedTxns": len(self.plan.aborted),
            "segments": [s._asdict() for s in self.segments],
        }


@dataclass
class Manifest:
    out_dir: str
    options: GenerateOptions
    partitions: dict[tuple[str, int], PartitionManifest]
    cleaner_checkpoint: dict[tuple[str, int], int]
    bytes_written: int = 0

    def summary(self) -> dict:
        return {
            "version": 1,
            "outDir": self.out_dir,
            "options": asdict(self.options),
            "bytesWritten": self.bytes_written,
            "cleanerCheckpoint": [[t, p, o] for (t, p), o in sorted(self.cleaner_checkpoint.items())],
            "partitions": [m.summary() for _, m in sorted(self.partitions.items())],
        }
