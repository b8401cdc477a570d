"""What the generator writes, decided before any byte is encoded (pure numpy, deterministic).

One `GeneratedPartition` per partition holds two column tables in log order:
* records (one row per offset; row index == offset, control markers included), and
* batches (data batches and transaction markers), each pointing at its first record row.
The writer (generator.py) turns batches into bytes; the manifest hands the record columns to
tests, which compute the expected compaction result from them independently of our reader.

Producers mimic a broker's view of real clients: plain producers (no producer id), idempotent
producers (producer id + epoch, sequences increasing per partition) and transactional producers
(idempotent + transactional batches, one open transaction per producer at a time, several open
at once across producers, closed by COMMIT/ABORT markers carrying the coordinator epoch).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from compaction.format.layout import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    MAGIC_V0,
    MIN_ENTRY_SIZE,
)

TXN_NONE, TXN_COMMITTED, TXN_ABORTED = 0, 1, 2
KIND_PLAIN, KIND_IDEMPOTENT, KIND_TRANSACTIONAL = 0, 1, 2
MARKER_ABORT, MARKER_COMMIT = 0, 1  # ControlRecordType ids (docs/kafka-rules.md#control-records)
CODEC_IDS = {
    "none": CODEC_NONE,
    "gzip": CODEC_GZIP,
    "snappy": CODEC_SNAPPY,
    "lz4": CODEC_LZ4,
    "zstd": CODEC_ZSTD,
}
TXN_PRODUCER_BASE_ID = 1000
IDEMPOTENT_PRODUCER_BASE_ID = 2000
KEY_PREFIX = b"key-"
HEADER_VALUE_SIZE = 8
_VOCABULARY = (
    b"order customer account balance status pending shipped paid refund item price amount "
    b"quantity sku warehouse region north south east west user session click view cart "
    b"checkout payment card token currency eur usd address street city zip country email "
    b"phone created updated deleted version true false null id name value count total"
).split()


@dataclass(frozen=True)
class GenerateOptions:
    """Every knob of `generate_log_dir`; the CLI flags map 1:1 (dashes for underscores)."""

    topics: tuple[tuple[str, int], ...] = (("orders", 2), ("customers", 2))
    records: int = 10_000
    keys: int = 1_000
    key_skew: float = 0.0
    key_size: int = 10
    value_size: tuple[int, int] = (20, 200)
    codec: str = "none"
    batch_records: tuple[int, int] = (1, 100)
    segment_bytes: int = 1_048_576
    index_interval_bytes: int = 4096
    tombstone_ratio: float = 0.05
    headers: int = 0
    transactions: float = 0.0
    idempotent: float = 0.0
    abort_ratio: float = 0.3
    txn_producers: int = 4
    idempotent_producers: int = 2
    txn_batches: int = 3
    legacy: str | None = None
    timestamp_start: int = 1_700_000_000_000
    timestamp_step_ms: int = 1
    leader_epochs: int = 1
    seed: int = 0
    checkpoint: tuple[tuple[str, int | None, int], ...] = ()
    broker_id: int = 0

    @property
    def magic(self) -> int:
        return {None: 2, "v0": 0, "v1": 1}[self.legacy]

    def validate(self) -> None:
        """Reject combinations a broker could not have written (ValueError with the reason)."""
        _check(self.records >= 0 and self.keys >= 1, "--records must be >= 0 and --keys >= 1")
        digits = self.key_size - 4
        _check(digits >= len(str(self.keys - 1)), f"--key-size {self.key_size}: too few digits for --keys")
        lo, hi = self.value_size
        _check(0 <= lo <= hi, "--value-size needs 0 <= MIN <= MAX")
        blo, bhi = self.batch_records
        _check(1 <= blo <= bhi, "--batch-records needs 1 <= MIN <= MAX")
        _check(self.codec in CODEC_IDS or self.codec == "mixed", f"unknown codec {self.codec}")
        _check(self.legacy in (None, "v0", "v1"), "--legacy must be v0 or v1")
        _check(self.segment_bytes >= MIN_ENTRY_SIZE, "--segment-bytes too small")
        for ratio in (self.tombstone_ratio, self.transactions, self.idempotent, self.abort_ratio):
            _check(0.0 <= ratio <= 1.0, "ratios must be within [0, 1]")
        _check(self.transactions + self.idempotent <= 1.0, "--transactions + --idempotent must be <= 1")
        _check(self.leader_epochs >= 1 and self.txn_batches >= 1, "--leader-epochs/--txn-batches >= 1")
        if self.legacy is not None:
            # v0/v1 have no producer ids, headers or zstd (docs/kafka-rules.md#legacy-messages): refuse
            # instead of faking it.
            _check(self.transactions == 0 and self.idempotent == 0, "--legacy cannot have producers ids")
            _check(self.headers == 0, "--legacy cannot carry headers")
            _check(self.codec != "zstd", "--legacy cannot use zstd")


def key_bytes(key_id: int, key_size: int) -> bytes:
    """The key of `key_id`: b"key-000123" for key_size 10 (generator_encode writes the same)."""
    return KEY_PREFIX + str(key_id).zfill(key_size - len(KEY_PREFIX)).encode()


def header_name(j: int) -> str:
    """Header j of every record is (h<j>, 8 value-pool bytes starting j bytes into the value)."""
    return f"h{j}"


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass
class Producer:
    producer_id: int
    epoch: int
    coordinator_epoch: int  # only meaningful for transactional producers


@dataclass
class GeneratedPartition:
    """One generated partition's log as column tables, every record and batch decided, none encoded."""

    topic: str
    partition: int
    # record columns, row index == offset
    timestamp: np.ndarray
    key_id: np.ndarray  # -1 for control records
    value_pos: np.ndarray
    value_len: np.ndarray  # -1 = null value (tombstone); 6 for a marker's value
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    sequence: np.ndarray  # -1 when the batch has no producer id
    txn: np.ndarray  # TXN_NONE / TXN_COMMITTED / TXN_ABORTED (markers: the outcome they record)
    control_type: np.ndarray  # -1 data, MARKER_ABORT, MARKER_COMMIT
    coordinator_epoch: np.ndarray  # -1 for data records
    batch: np.ndarray  # batch row of each record
    # batch columns, log order
    b_first: np.ndarray
    b_count: np.ndarray
    b_codec: np.ndarray
    b_pid: np.ndarray
    b_epoch: np.ndarray
    b_seq: np.ndarray
    b_transactional: np.ndarray
    b_control: np.ndarray
    b_leader_epoch: np.ndarray
    aborted: list[tuple[int, int, int, int]] = field(default_factory=list)  # pid, first, last, LSO

    @property
    def log_end_offset(self) -> int:
        return len(self.timestamp)

    @property
    def offset(self) -> np.ndarray:
        return np.arange(self.log_end_offset, dtype=np.int64)

    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) for each epoch change, as leader-epoch-checkpoint lists them."""
        if len(self.b_first) == 0 or self.b_leader_epoch[0] < 0:
            return []
        change = np.flatnonzero(np.diff(self.b_leader_epoch, prepend=-1))
        return [(int(self.b_leader_epoch[i]), int(self.b_first[i])) for i in change]


def partition_rng(seed: int, topic: str, partition: int, purpose: int) -> np.random.Generator:
    # zlib.crc32, not hash(): Python's str hash is salted per process and would break determinism.
    entropy = [seed, zlib.crc32(topic.encode()), partition, purpose]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def make_producers(options: GenerateOptions) -> tuple[list[Producer], list[Producer]]:
    """Producers shared by every partition (one client writes to many partitions)."""
    rng = np.random.default_rng(np.random.SeedSequence([options.seed, 0xB0B]))
    txn = [
        Producer(TXN_PRODUCER_BASE_ID + i, int(rng.integers(0, 6)), int(rng.integers(0, 30)))
        for i in range(options.txn_producers)
    ]
    idem = [
        Producer(IDEMPOTENT_PRODUCER_BASE_ID + i, int(rng.integers(0, 3)), -1)
        for i in range(options.idempotent_producers)
    ]
    return txn, idem


def make_value_pool(options: GenerateOptions) -> np.ndarray:
    """Text-like bytes values are sliced from: compressible the way JSON-ish payloads are."""
    rng = np.random.default_rng(np.random.SeedSequence([options.seed, 0x9001]))
    need = max(1 << 20, 4 * options.value_size[1]) + options.value_size[1] + options.headers + 16
    words = rng.integers(0, len(_VOCABULARY), need // 4 + 16)
    text = b" ".join(_VOCABULARY[i] for i in words)
    return np.frombuffer(text[:need], dtype=np.uint8).copy()


def draw_batch_sizes(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    sizes = rng.integers(lo, hi + 1, n // lo + 1)
    cut = int(np.searchsorted(np.cumsum(sizes), n))
    sizes = sizes[: cut + 1].copy()
    if len(sizes):
        sizes[-1] -= int(sizes.sum()) - n
    return sizes[sizes > 0].astype(np.int64)


def draw_key_ids(rng: np.random.Generator, n: int, keys: int, skew: float) -> np.ndarray:
    """Key ids; rank k has weight (k+1)^-skew, so key-000000 is the hottest key when skewed."""
    if skew == 0:
        return rng.integers(0, keys, n, dtype=np.int64)
    weights = np.arange(1, keys + 1, dtype=np.float64) ** -skew
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), keys - 1).astype(np.int64)


def plan_partition(
    options: GenerateOptions,
    topic: str,
    partition: int,
    producers: tuple[list[Producer], list[Producer]],
    pool_size: int,
) -> GeneratedPartition:
    """All batches and records of one partition, in log order, starting at offset 0."""
    rng = partition_rng(options.seed, topic, partition, 1)
    sizes = draw_batch_sizes(rng, options.records, *options.batch_records)
    draws = _BatchDraws(rng, len(sizes), options)
    log = _LogBuilder(options, producers)
    for b, count in enumerate(sizes):
        epoch = b * options.leader_epochs // len(sizes) if options.legacy is None else -1
        log.data_batch(int(count), draws, b, epoch)
    log.close_open_transactions()
    return log.finish(topic, partition, sizes, _draw_records(rng, options, pool_size))


class _BatchDraws:
    """Per-batch random choices, drawn up front so the loop below stays cheap and deterministic."""

    def __init__(self, rng: np.random.Generator, nb: int, options: GenerateOptions) -> None:
        u = rng.random(nb)
        self.kind = np.where(
            u < options.transactions,
            KIND_TRANSACTIONAL,
            np.where(u < options.transactions + options.idempotent, KIND_IDEMPOTENT, KIND_PLAIN),
        )
        self.pick = rng.integers(0, 1 << 30, nb)
        self.abort = rng.random(nb) < options.abort_ratio
        self.txn_len = rng.integers(1, options.txn_batches + 1, nb)
        if options.codec == "mixed":
            allowed = 4 if options.legacy else 5  # legacy formats have no zstd
            self.codec = rng.integers(0, allowed, nb)
        else:
            self.codec = np.full(nb, CODEC_IDS[options.codec])


@dataclass
class _OpenTxn:
    txn_id: int
    first_offset: int
    batches_left: int
    abort: bool


class _LogBuilder:
    """Lays batches out in offset order and tracks producer/transaction state like a broker's
    ProducerStateManager would see it."""

    def __init__(self, options: GenerateOptions, producers: tuple[list[Producer], list[Producer]]) -> None:
        self.options = options
        self.txn_producers, self.idem_producers = producers
        self.next_offset = 0
        self.sequences: dict[int, int] = {}
        self.open: dict[int, _OpenTxn] = {}  # txn producer index -> its open transaction
        self.txn_status: list[int] = []
        self.aborted: list[tuple[int, int, int, int]] = []
        # one tuple per batch: first offset, count, codec, producer id, producer epoch, base sequence,
        # transactional, control, leader epoch, txn id, coordinator epoch, control type
        self.rows: list[tuple] = []
        self.epoch = -1

    def data_batch(self, count: int, draws: _BatchDraws, b: int, leader_epoch: int) -> None:
        self.epoch = leader_epoch
        kind = int(draws.kind[b])
        first, codec = self.next_offset, int(draws.codec[b])
        self.next_offset += count
        if kind == KIND_PLAIN:
            self.rows.append((first, count, codec, -1, -1, -1, False, False, leader_epoch, -1, -1, -1))
            return
        pool = self.txn_producers if kind == KIND_TRANSACTIONAL else self.idem_producers
        index = int(draws.pick[b]) % len(pool)
        producer = pool[index]
        seq = self.sequences.get(producer.producer_id, 0)
        self.sequences[producer.producer_id] = seq + count
        txn_id = -1
        if kind == KIND_TRANSACTIONAL:
            txn = self.open.get(index)
            if txn is None:
                txn = self.open[index] = self._begin(first, draws, b)
            txn_id = txn.txn_id
        self.rows.append(
            (
                first,
                count,
                codec,
                producer.producer_id,
                producer.epoch,
                seq,
                kind == KIND_TRANSACTIONAL,
                False,
                leader_epoch,
                txn_id,
                -1,
                -1,
            )
        )
        if kind == KIND_TRANSACTIONAL:
            self.open[index].batches_left -= 1
            if self.open[index].batches_left == 0:
                self._end(index)

    def _begin(self, first: int, draws: _BatchDraws, b: int) -> _OpenTxn:
        self.txn_status.append(TXN_NONE)
        return _OpenTxn(len(self.txn_status) - 1, first, int(draws.txn_len[b]), bool(draws.abort[b]))

    def _end(self, index: int) -> None:
        """Write the marker; an aborted transaction also gets its .txnindex entry
        (docs/kafka-rules.md#txnindex)."""
        txn = self.open.pop(index)
        producer = self.txn_producers[index]
        marker = self.next_offset
        self.next_offset += 1
        self.txn_status[txn.txn_id] = TXN_ABORTED if txn.abort else TXN_COMMITTED
        control = MARKER_ABORT if txn.abort else MARKER_COMMIT
        self.rows.append(
            (
                marker,
                1,
                0,
                producer.producer_id,
                producer.epoch,
                -1,
                True,
                True,
                self.epoch,
                txn.txn_id,
                producer.coordinator_epoch,
                control,
            )
        )
        if txn.abort:
            # LSO when the abort completes: first offset of another ongoing transaction, else marker + 1
            others = [t.first_offset for t in self.open.values()]
            lso = min(others, default=marker + 1)
            self.aborted.append((producer.producer_id, txn.first_offset, marker, lso))

    def close_open_transactions(self) -> None:
        for index in sorted(self.open):
            self._end(index)

    def finish(
        self, topic: str, partition: int, sizes: np.ndarray, data: dict[str, np.ndarray]
    ) -> GeneratedPartition:
        rows = self.rows
        total = self.next_offset
        col = lambda i, dtype=np.int64: np.array([r[i] for r in rows], dtype=dtype)  # noqa: E731
        b_first, b_count, b_control = col(0), col(1), col(7, bool)
        b_pid, b_epoch, b_seq, b_txn = col(3), col(4), col(5), col(9)
        batch = np.repeat(np.arange(len(rows), dtype=np.int64), b_count)
        offset = np.arange(total, dtype=np.int64)
        data_rows = ~b_control[batch]
        status = np.array([*self.txn_status, TXN_NONE], dtype=np.int8)  # txn id -1 -> TXN_NONE
        in_batch = offset - b_first[batch]
        plan = GeneratedPartition(
            topic=topic,
            partition=partition,
            timestamp=self._timestamps(offset),
            key_id=_scatter(total, data_rows, data["key_id"], -1),
            value_pos=_scatter(total, data_rows, data["value_pos"], -1),
            value_len=_scatter(total, data_rows, data["value_len"], 6),
            producer_id=b_pid[batch],
            producer_epoch=b_epoch[batch],
            sequence=np.where(b_seq[batch] >= 0, b_seq[batch] + in_batch, -1),
            txn=status[b_txn[batch]],
            control_type=col(11)[batch],
            coordinator_epoch=col(10)[batch],
            batch=batch,
            b_first=b_first,
            b_count=b_count,
            b_codec=col(2),
            b_pid=b_pid,
            b_epoch=b_epoch,
            b_seq=b_seq,
            b_transactional=col(6, bool),
            b_control=b_control,
            b_leader_epoch=col(8),
            aborted=self.aborted,
        )
        assert int(data_rows.sum()) == int(sizes.sum())
        return plan

    def _timestamps(self, offset: np.ndarray) -> np.ndarray:
        if self.options.magic == MAGIC_V0:
            return np.full(len(offset), -1, dtype=np.int64)  # v0 has no timestamps
        return self.options.timestamp_start + offset * self.options.timestamp_step_ms


def _scatter(total: int, mask: np.ndarray, values: np.ndarray, fill: int) -> np.ndarray:
    out = np.full(total, fill, dtype=np.int64)
    out[mask] = values
    return out


def _draw_records(
    rng: np.random.Generator, options: GenerateOptions, pool_size: int
) -> dict[str, np.ndarray]:
    n = options.records
    lo, hi = options.value_size
    value_len = rng.integers(lo, hi + 1, n, dtype=np.int64)
    value_len[rng.random(n) < options.tombstone_ratio] = -1
    return {
        "key_id": draw_key_ids(rng, n, options.keys, options.key_skew),
        "value_len": value_len,
        "value_pos": rng.integers(0, pool_size - hi - options.headers - 8, n, dtype=np.int64),
    }
