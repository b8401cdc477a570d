"""What an executor is given for one output group: its source segments and the round's decisions
about them (bounds, horizons, producer state, modes), the same for the scan and the rewrite."""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.format import naming
from compaction.format.txnindex import AbortedTxn
from compaction.policy.txn_state import LastRecord
from compaction.runtime.storage import Storage
from compaction.settings import MAX_INFLATED_BATCH_BYTES, ReadMode, WriteMode

CLEANED = ".cleaned"


@dataclass(frozen=True)
class SourceSegment:
    base_offset: int
    size: int
    mtime_ns: int
    # The base offset of the partition's next segment (None: the last one, or not known): this
    # segment's offsets must stay below it (log_structure.py).
    next_base_offset: int | None = None


@dataclass(frozen=True)
class GroupSpec:
    """Everything an executor needs to scan or rewrite one output group."""

    group_id: int
    topic: str
    partition: int
    storage: Storage
    part_path: str
    segments: tuple[SourceSegment, ...]
    first_dirty_offset: int
    upper_bound: int  # first uncleanable offset (segment-aligned)
    now_ms: int
    delete_retention_ms: int
    legacy_delete_horizon_ms: int
    index_interval_bytes: int
    aborted_txns: tuple[AbortedTxn, ...] = ()
    last_records: dict[int, LastRecord] = field(default_factory=dict)
    # A batch whose next offset is this is kept, empty if need be: the log's high watermark
    # (docs/kafka-rules.md#batch-retention); None when no batch of the round can end there.
    retain_empty_offset: int | None = None
    # Uncleanable segments (incl. the active one): read for producer state only, never rewritten.
    tail_segments: tuple[SourceSegment, ...] = ()
    max_message_bytes: int = 2**31 - 1  # max.message.bytes: a larger batch fails the partition
    # segment.index.bytes: a cleaned segment whose indexes need more fails the partition
    segment_index_bytes: int = 2**31 - 1
    # --producer-id-expiration-ms: producers idle that long before now_ms expire (None: none do)
    producer_id_expiration_ms: int | None = None
    # --max-inflated-batch-bytes: a batch whose records inflate past it fails the partition
    max_inflated_batch_bytes: int = MAX_INFLATED_BATCH_BYTES
    read_mode: ReadMode = "buffered"  # how source segments are read (--read-mode)
    write_mode: WriteMode = "direct"  # how cleaned segments are written (--write-mode)
    dry_run: bool = False  # --dry-run: everything decided and sized as in a round, nothing written
    leader_epoch_checkpoint: str | None = None  # its path, when the partition dir holds one
    # --erase-keys: the listed keys (erase.EraseSet, shared by every spec: pickled once a job).
    erase: object | None = None
    # A group that only erases (one source segment, no compaction rule): records of listed keys
    # go, every other batch stays as it is; nothing is written when nothing is erased.
    erase_only: bool = False

    @property
    def new_base(self) -> int:
        return self.segments[0].base_offset

    def segment_path(self, base: int, suffix: str = ".log") -> str:
        return f"{self.part_path}/{naming.segment_file_name(base, suffix)}"
