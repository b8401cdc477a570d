"""The three paths of `scan_segment`, each walked into record columns, and their typed errors.

* uncompressed v2 batches and uncompressed v0/v1 messages, in the file buffer: every CRC checked
  and the records walked ~CHUNK_BYTES of batches at a time (`_verify_and_walk_plain`);
* compressed v2 batches: record streams decompressed into a side buffer and walked there
  (`_walk_compressed`);
* compressed v0/v1 wrappers: values decompressed into a side buffer, inner messages walked by
  `legacywalk` (`_walk_wrappers`);

then `_merge` puts the records of the three back into batch order.
"""

from __future__ import annotations

import numpy as np

from compaction.errors import CorruptRecordError, CrcMismatchError, KafkaFormatError, UnsupportedCodecError
from compaction.format.compression import inflate, inflate_into
from compaction.format.layout import (
    CODEC_LZ4,
    COMPRESSION_CODEC_MASK,
    MAGIC_V0,
    MAX_CODEC,
    MAX_LEGACY_CODEC,
    MIN_RECORD_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from compaction.format.legacy import LegacyBatch
from compaction.kernels.buffers import POOL, POOLED_MIN_BYTES
from compaction.kernels.inflate_bounds import NO_BOUND, inflate_bounds
from compaction.kernels.keyhash import hash_keys
from compaction.kernels.legacywalk import ERR_NAMES as LEGACY_ERR_NAMES
from compaction.kernels.legacywalk import entry_crcs, region_capacity, walk_legacy_kernel
from compaction.kernels.lz4_frames import FALLBACK, lz4_frame_into
from compaction.kernels.scan_columns import (
    ERR_NAMES,
    ERR_OK,
    RECORD_DTYPES,
    RECORD_FIELDS,
    BatchColumns,
    RecordColumns,
    _capacity,
    _empty_records,
    _walk_inputs,
)
from compaction.kernels.scan_kernels import _walk_kernel
from compaction.settings import MAX_INFLATED_BATCH_BYTES

CHUNK_BYTES = 1 << 20  # batches checked and walked together, while they are in the CPU cache


def _verify_and_walk_plain(
    file,
    batches: BatchColumns,
    plain: np.ndarray,
    messages: np.ndarray,
    path: str,
    verify: bool,
    hashing: bool = False,
) -> tuple[_SubsetWalk, _LegacyWalk]:
    """Every batch's CRC (raising the first mismatch), the records of the uncompressed v2
    batches `plain` and the messages of the uncompressed legacy entries `messages`, ~CHUNK_BYTES
    of batches at a time: the CRC pass streams a chunk into the cache and the walks, whose every
    step waits for the bytes the previous one read, find it there (two passes over a whole 64 MiB
    segment, bigger than the cache, made the walk wait for memory at every step). Each walk stops
    at its first malformed record (its columns say where); the CRCs are checked to the end. With
    `hashing`, each chunk's keys are packed and hashed right after its walk
    (`keyhash.hash_keys`), for the same reason. Returns the two walks."""
    cuts = _chunk_cuts(batches.position + batches.size)
    plain_cuts = np.searchsorted(plain, cuts).tolist()
    message_cuts = np.searchsorted(messages, cuts).tolist()
    walk = _SubsetWalk(
        file,
        batches,
        plain,
        batches.position[plain] + RECORD_BATCH_OVERHEAD,
        batches.position[plain] + batches.size[plain],
        hashing,
    )
    at = batches.position[messages]
    legacy = _LegacyWalk(file, messages, at, at + batches.size[messages], hashing=hashing)
    lo = 0
    for hi, plain_hi, message_hi in zip(cuts, plain_cuts, message_cuts, strict=True):
        if verify:
            _verify_crcs(file, batches, path, lo, hi)
        walk.advance(int(plain_hi))
        legacy.advance(int(message_hi))
        lo = hi
    return walk, legacy


def _chunk_cuts(ends: np.ndarray) -> list[int]:
    """Ends (exclusive indexes) of runs of ~CHUNK_BYTES of the items whose byte ranges end at
    `ends` (ascending); the last is len(ends)."""
    n = len(ends)
    if not n:
        return [0]
    marks = ends[0] + np.arange(CHUNK_BYTES, int(ends[-1] - ends[0]) + CHUNK_BYTES, CHUNK_BYTES)
    return [c for c in np.unique(np.searchsorted(ends, marks, side="right")).tolist() if c < n] + [n]


class _SubsetWalk:
    """`walk_records` over the v2 batches `idx` of `batches`, whose records are
    buf[rec_start[j]:rec_end[j]], called for a prefix of them at a time into one set of columns;
    batch indexes in the columns are those of `batches`. With `hashing`, the keys walked are
    packed and hashed too (`keys()`)."""

    kernel = staticmethod(_walk_kernel)

    def __init__(
        self,
        file,
        batches: BatchColumns,
        idx: np.ndarray,
        rec_start,
        rec_end,
        hashing: bool = False,
        capacity: int | None = None,
    ) -> None:
        args = _walk_inputs(
            rec_start,
            rec_end,
            batches.base_offset[idx],
            batches.base_timestamp[idx],
            batches.timestamp_type[idx],
            batches.max_timestamp[idx],
            batches.records_count[idx],
        )
        capacity = _capacity(args[0], args[1], args[6]) if capacity is None else capacity
        self._setup(file, idx, args, capacity, hashing)

    def _setup(self, file, idx: np.ndarray, args: tuple, capacity: int, hashing: bool) -> None:
        self.file, self.idx, self.args, self.capacity = file, idx, args, capacity
        self.cols = [np.empty(self.capacity, dtype=dt) for dt in RECORD_DTYPES]
        self.done = self.k = 0  # batches walked, records written
        self.error = (ERR_OK, -1, -1)
        self.hashing = hashing
        if hashing:
            self.hashes = np.empty(self.capacity, np.uint64)
            self.packed_offs = np.empty(self.capacity + 1, np.int64)
            self.packed = np.empty(max(1, len(file) // 16), np.uint8)  # grown as needed
            self.packed_end = 0

    def advance(self, upto: int) -> None:
        """Walk batches [done, upto) of `idx` (nothing more after an error)."""
        a, b = self.done, upto
        if b <= a or self.error[0] != ERR_OK:
            return
        w, code, pos, batch = self.kernel(
            self.file, *(x[a:b] for x in self.args), self.capacity - self.k, *(c[self.k :] for c in self.cols)
        )
        self.cols[0][self.k : self.k + w] += a  # batch indexes relative to the call
        if self.hashing and w:
            self._hash(self.k, self.k + w)
        self.k += w
        self.done = b
        if code != ERR_OK:
            self.error = (int(code), int(pos), int(batch) + a)

    def advance_growing(self, upto: int) -> None:
        """`advance`, for regions known only as they are filled, back to back (their starts and
        ends set up to `upto`): the columns grow first to what batches [done, upto) may hold
        (`_capacity`), when their bytes could hold more records than there is room for."""
        a, b = self.done, upto
        start, end, limit = self.args[0], self.args[1], self.args[6]
        if b > a and self.k + max(int(end[b - 1]) - int(start[a]), 0) // MIN_RECORD_SIZE > self.capacity:
            need = self.k + _capacity(start[a:b], end[a:b], limit[a:b])
            if need > self.capacity:
                self.capacity = max(need, 2 * self.capacity)
                self.cols = [_grown(c, self.k, self.capacity) for c in self.cols]
                if self.hashing:
                    self.hashes = _grown(self.hashes, self.k, self.capacity)
                    self.packed_offs = _grown(self.packed_offs, self.k + 1, self.capacity + 1)
        self.advance(upto)

    def _hash(self, first: int, last: int) -> None:
        key_pos, key_len = self.cols[3], self.cols[4]
        need = self.packed_end + int(np.maximum(key_len[first:last], 0).sum())
        if need > len(self.packed):
            grown = np.empty(max(need, 2 * len(self.packed)), np.uint8)
            grown[: self.packed_end] = self.packed[: self.packed_end]
            self.packed = grown
        self.packed_end = hash_keys(
            self.file,
            self.file[:0],
            len(self.file),
            key_pos,
            key_len,
            first,
            last,
            self.packed,
            self.packed_offs,
            self.hashes,
            self.packed_end,
        )

    def keys(self) -> tuple | None:
        if not self.hashing:
            return None
        if self.k == 0:
            self.packed_offs[0] = 0
        return self.hashes[: self.k], self.packed[: self.packed_end], self.packed_offs[: self.k + 1]

    def columns(self) -> RecordColumns:
        code, pos, batch = self.error
        cols = RecordColumns(
            *(c[: self.k] for c in self.cols),
            error_code=code,
            error_position=pos,
            error_batch=int(self.idx[batch]) if batch >= 0 else -1,
        )
        cols.batch_index = self.idx[cols.batch_index].astype(np.int32)  # subset index -> batch index
        return cols


def _grown(a: np.ndarray, used: int, n: int) -> np.ndarray:
    """An array of n elements of a's type starting with a[:used]."""
    out = np.empty(n, a.dtype)
    out[:used] = a[:used]
    return out


class _LegacyWalk(_SubsetWalk):
    """`legacywalk.walk_legacy_kernel` over the regions buf[start[j]:end[j]] of the legacy
    entries `idx` (each region an uncompressed entry, or with `inner` the decompressed messages of
    a compressed wrapper, whose offset, magic, LogAppendTime flag and timestamp come with it), a
    prefix of them at a time, like `_SubsetWalk`."""

    kernel = staticmethod(walk_legacy_kernel)

    def __init__(
        self,
        buf,
        idx: np.ndarray,
        start,
        end,
        inner=None,
        wrapper_offset=None,
        wrapper_magic=None,
        wrapper_lat=None,
        wrapper_ts=None,
        hashing: bool = False,
    ) -> None:
        n = len(idx)
        zeros = np.zeros(n, dtype=np.int64)
        args = (
            np.ascontiguousarray(start, dtype=np.int64),
            np.ascontiguousarray(end, dtype=np.int64),
            np.zeros(n, dtype=np.bool_) if inner is None else np.ascontiguousarray(inner, dtype=np.bool_),
            zeros if wrapper_offset is None else np.ascontiguousarray(wrapper_offset, dtype=np.int64),
            zeros if wrapper_magic is None else np.ascontiguousarray(wrapper_magic, dtype=np.int64),
            np.zeros(n, dtype=np.bool_)
            if wrapper_lat is None
            else np.ascontiguousarray(wrapper_lat, dtype=np.bool_),
            zeros if wrapper_ts is None else np.ascontiguousarray(wrapper_ts, dtype=np.int64),
        )
        self._setup(buf, idx, args, region_capacity(args[0], args[1], args[2]), hashing)


def _verify_crcs(
    file: np.ndarray, batches: BatchColumns, path: str, lo: int = 0, hi: int | None = None
) -> None:
    """CRC-32C over [21, size) for v2, CRC-32 over [16, size) for v0/v1 (docs/kafka-rules.md#crc,
    #legacy-messages), of batches [lo, hi), in one compiled call (`legacywalk.entry_crcs`)."""
    hi = len(batches.position) if hi is None else hi
    actual = entry_crcs(file, batches.position[lo:hi], batches.size[lo:hi], batches.magic[lo:hi])
    bad = np.flatnonzero(actual != batches.crc[lo:hi])
    if len(bad):
        i = lo + int(bad[0])
        raise CrcMismatchError(
            f"magic v{int(batches.magic[i])} batch checksum mismatch",
            expected=int(batches.crc[i]),
            actual=int(actual[i - lo]),
            path=path,
            position=int(batches.position[i]),
            offset=int(batches.base_offset[i]),
        )


def _check_codecs(batches: BatchColumns, codec: np.ndarray, v2: np.ndarray, path: str) -> None:
    # zstd (4) is illegal in legacy messages (docs/kafka-rules.md#compression); 5..7 are undefined everywhere.
    bad = np.flatnonzero((codec > MAX_CODEC) | (~v2 & (codec > MAX_LEGACY_CODEC)))
    if len(bad):
        i = int(bad[0])
        raise UnsupportedCodecError(
            f"unsupported compression codec id {int(codec[i])} in a magic v{int(batches.magic[i])} batch",
            path=path,
            position=int(batches.position[i]),
            offset=int(batches.base_offset[i]),
        )


_NO_BYTES = np.empty(0, dtype=np.uint8)


def _walk_compressed(
    file,
    batches: BatchColumns,
    idx: np.ndarray,
    path: str,
    base: int,
    hashing: bool = False,
    limit: int = MAX_INFLATED_BATCH_BYTES,
) -> tuple[RecordColumns, np.ndarray, tuple | None]:
    """Compressed v2 batches: decompress each record stream (at most `limit` bytes a batch)
    into the side buffer, walking (and with `hashing`, packing and hashing the keys of) ~CHUNK_BYTES
    of it at a time, right after it is written there, while it is in the CPU cache. A batch whose
    framing declares its worst case within `limit` (`compression.inflate_bound`, all of them in one
    compiled call: `inflate_bounds`) is decompressed straight into the side buffer (`inflate_into`),
    which grows to hold that worst case; another is inflated (`compression.inflate`, each piece
    given back as it is copied: no batch is held twice). Returns (columns, side, keys or None)."""
    if not len(idx):
        walk = _SubsetWalk(_NO_BYTES, batches, idx, idx, idx, hashing)
        return _empty_records(), _NO_BYTES, walk.keys()

    mv = memoryview(file)
    position, size = batches.position[idx], batches.size[idx]
    codecs = batches.attributes[idx] & COMPRESSION_CODEC_MASK
    # What each batch's framing declares, where that is within the limit (else NO_BOUND: inflated).
    bounds = inflate_bounds(file, position + RECORD_BATCH_OVERHEAD, position + size, codecs)
    bounds[bounds > limit] = NO_BOUND
    # Room for what the framing declares (about the records plus a block a batch), at most
    # SIDE_FIRST_RATIO times the compressed bytes: a declared bound is not what the batch holds.
    compressed = int(size.sum())
    declared = int(np.where(bounds == NO_BOUND, SIDE_FIRST_RATIO * size, bounds).sum())
    side = _Side(min(declared, SIDE_FIRST_RATIO * compressed))
    # Columns for the records the batches declare, at most one per MIN_RECORD_SIZE compressed
    # bytes (more are made room for as the batches are decoded: `advance_growing`).
    none = np.zeros(len(idx), dtype=np.int64)
    declared_ends = np.maximum(bounds, 0)
    capacity = min(_capacity(none, declared_ends, batches.records_count[idx]), compressed // MIN_RECORD_SIZE)
    walk = _SubsetWalk(side.buf, batches, idx, none, none.copy(), hashing, capacity)
    start, end = walk.args[0], walk.args[1]  # the walk's regions, set as the batches are decoded
    walked, last = 0, len(idx) - 1
    # Python ints, not numpy scalars, in the loop: each batch costs a few Python steps around its
    # decompression, and numpy scalars' arithmetic and slicing are several times slower.
    columns = (position, position + size, codecs, bounds, batches.base_offset[idx])
    for j, (pos, stop, codec, bound, offset) in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        data = mv[pos + RECORD_BATCH_OVERHEAD : stop]
        start[j] = side.at
        if bound != NO_BOUND:
            into = side.room(bound)
            # lz4 frames as producers write them in one compiled call; the rest, and any frame
            # it does not take, through the libraries (kernels/lz4_frames.py)
            got = FALLBACK
            if codec == CODEC_LZ4:
                got = lz4_frame_into(file, pos + RECORD_BATCH_OVERHEAD, stop, side.buf, side.at, bound)
            side.at += got if got >= 0 else _decode(inflate_into, codec, data, into, path, pos, offset, limit)
        else:
            pieces = _decode(inflate, codec, data, None, path, pos, offset, limit)
            side.room(sum(len(p) for p in pieces))
            side.at = _copy_pieces(memoryview(side.buf), side.at, pieces)
        end[j] = side.at
        if side.at - walked >= CHUNK_BYTES or j == last:
            walk.file = side.buf
            walk.advance_growing(j + 1)
            walked = side.at
    out = side.buf[: side.at]
    out.flags.writeable = False
    walk.file = out
    cols = walk.columns()
    _raise_walk_error(cols, batches, path, in_side=True, side_start=start)
    cols.key_pos += base
    cols.value_pos += base
    return cols, out, walk.keys()


# The side buffer first holds at most this many times a segment's compressed records; it grows
# (a copy of what it holds) when the batches declare more.
SIDE_FIRST_RATIO = 8


class _Side:
    """A growing buffer the batches are decompressed into, from the process's pool (a fresh
    multi-MiB array is fresh pages, faulted in and zeroed every segment): `buf[:at]` is filled."""

    def __init__(self, capacity: int) -> None:
        self.buf, self.at = self._take(capacity), 0

    @staticmethod
    def _take(n: int) -> np.ndarray:
        # All of the pool buffer's room: a segment that inflates past its first guess grows into
        # it instead of into a second buffer.
        return POOL.take(n, whole=True) if n >= POOLED_MIN_BYTES else np.empty(n, dtype=np.uint8)

    def room(self, n: int) -> np.ndarray:
        """buf[at:at + n], the buffer grown first (by half at least) if it is too small."""
        if self.at + n > len(self.buf):
            grown = self._take(max(self.at + n, len(self.buf) + len(self.buf) // 2))
            grown[: self.at] = self.buf[: self.at]
            self.buf = grown
        return self.buf[self.at : self.at + n]


def _copy_pieces(into: memoryview, at: int, pieces: list) -> int:
    """Copy a batch's pieces to into[at:], dropping each once copied (a big piece is its own
    mapping: freed, it leaves the process); returns where they end."""
    while pieces:
        piece = pieces.pop(0)
        into[at : at + len(piece)] = piece
        at += len(piece)
        del piece
    return at


def _decode(decoder, codec: int, data, into, path: str, pos: int, offset: int, limit: int, magic: int = 2):
    """`decoder(codec, data[, into], magic, ...)` (`compression.inflate` or `inflate_into`) with
    every error typed and placed at the batch."""
    args = (codec, data, magic) if into is None else (codec, data, into, magic)
    try:
        return decoder(*args, path=path, position=pos, limit=limit)
    except KafkaFormatError as e:  # already typed and placed; add the offset
        e.offset = offset
        raise
    except Exception as e:  # anything a codec library raises that compression.py does not map
        raise CorruptRecordError(
            f"cannot decompress codec {codec} records: {type(e).__name__}: {e}",
            path=path,
            position=pos,
            offset=offset,
        ) from e


def _raise_walk_error(
    cols: RecordColumns, batches: BatchColumns, path: str, *, in_side: bool, side_start=None
) -> None:
    if cols.error_code == ERR_OK:
        return
    i = cols.error_batch
    batch_pos = int(batches.position[i])
    what = ERR_NAMES.get(cols.error_code, f"error {cols.error_code}")
    if in_side:  # the position is inside a decompressed stream: report the batch, and where in it
        j = int(np.searchsorted(side_start, cols.error_position, side="right") - 1)
        inner = cols.error_position - int(side_start[j])
        raise CorruptRecordError(
            f"{what} at byte {inner} of the decompressed records of the batch",
            path=path,
            position=batch_pos,
            offset=int(batches.base_offset[i]),
        )
    raise CorruptRecordError(
        f"{what} (in the batch at byte {batch_pos})",
        path=path,
        position=cols.error_position,
        offset=int(batches.base_offset[i]),
    )


def _walk_wrappers(
    file,
    batches: BatchColumns,
    idx: np.ndarray,
    path: str,
    base: int,
    hashing: bool = False,
    limit: int = MAX_INFLATED_BATCH_BYTES,
) -> tuple[RecordColumns, np.ndarray, tuple | None]:
    """Compressed v0/v1 wrappers `idx`: each one's value decompressed into the side buffer and its
    inner messages walked there in one kernel call (and with `hashing`, their keys packed and
    hashed). Sets each wrapper's `base_offset` (its first inner offset) and `records_count`.
    Returns (columns, side, keys or None); errors raise in file order."""
    if not len(idx):
        return _empty_records(), _NO_BYTES, _LegacyWalk(_NO_BYTES, idx, idx, idx, hashing=hashing).keys()

    outer = _LegacyWalk(file, idx, batches.position[idx], batches.position[idx] + batches.size[idx])
    outer.advance(len(idx))
    heads = outer.columns()
    n_ok = len(heads)  # wrappers whose own message is well-formed
    chunks, at = [], 0
    start = np.zeros(len(idx), dtype=np.int64)
    end = np.zeros(len(idx), dtype=np.int64)
    mv = memoryview(file)
    for j, i in enumerate(idx[:n_ok].tolist()):
        vp, vl = int(heads.value_pos[j]), int(heads.value_len[j])
        try:
            if vl < 0:
                _raise_legacy_error(file, batches, i, path, ERR_OK)  # a null value
            codec = int(batches.attributes[i]) & COMPRESSION_CODEC_MASK
            pieces = _decode(
                inflate,
                codec,
                mv[vp : vp + vl],
                None,
                path,
                vp,
                int(batches.last_offset[i]),
                limit,
                int(batches.magic[i]),
            )
        except KafkaFormatError:  # after the errors of the wrappers before it, if any (raised here)
            _walk_inner(
                file,
                batches,
                idx[:j],
                _joined(chunks, end[j - 1] if j else 0),
                start[:j],
                end[:j],
                path,
                base,
                False,
            )
            raise
        chunks.append(pieces)
        start[j], at = at, at + sum(len(p) for p in pieces)
        end[j] = at
    if n_ok < len(idx):  # the wrappers before it were read: their errors come first
        _walk_inner(
            file, batches, idx[:n_ok], _joined(chunks, at), start[:n_ok], end[:n_ok], path, base, False
        )
        _raise_legacy_error(file, batches, int(idx[n_ok]), path, heads.error_code)
    side = _joined(chunks, at)
    side.flags.writeable = False
    cols, keys = _walk_inner(file, batches, idx, side, start, end, path, base, hashing)
    return cols, side, keys


def _joined(chunks: list[list], total: int) -> np.ndarray:
    """The wrappers' pieces, `total` bytes, in one buffer (each piece dropped once copied)."""
    if len(chunks) == 1 and len(chunks[0]) == 1:
        return np.frombuffer(chunks[0][0], dtype=np.uint8)
    side = np.empty(total, dtype=np.uint8)
    into, at = memoryview(side), 0
    for pieces in chunks:
        n = sum(len(p) for p in pieces)
        _copy_pieces(into, at, pieces)
        at += n
    return side


def _walk_inner(
    file, batches: BatchColumns, idx: np.ndarray, side, start, end, path: str, base: int, hashing: bool
) -> tuple[RecordColumns, tuple | None]:
    """The inner messages of the wrappers `idx`, decompressed to side[start[j]:end[j]]; raises
    the first malformed one's error; positions moved by `base` (the side's combined address)."""
    magic = batches.magic[idx].astype(np.int64)
    lat = (magic > MAGIC_V0) & ((batches.attributes[idx] & TIMESTAMP_TYPE_MASK) != 0)
    inner = np.ones(len(idx), dtype=np.bool_)
    walk = _LegacyWalk(
        side,
        idx,
        start,
        end,
        inner,
        batches.last_offset[idx],
        magic,
        lat,
        batches.max_timestamp[idx],
        hashing,
    )
    walk.advance(len(idx))
    cols = walk.columns()
    if cols.error_code != ERR_OK:
        _raise_legacy_error(file, batches, cols.error_batch, path, cols.error_code)
    first = np.searchsorted(cols.batch_index, idx, side="left")
    batches.records_count[idx] = np.searchsorted(cols.batch_index, idx, side="right") - first
    batches.base_offset[idx] = cols.offset[first]  # every wrapper holds a message (else an error)
    cols.key_pos += base
    cols.value_pos += base
    return cols, walk.keys()


def _raise_legacy_error(file, batches: BatchColumns, i: int, path: str, code: int) -> None:
    """The typed error `legacy.LegacyBatch` raises for entry i (the reader Kafka's rules were
    written down in), which the kernel found malformed; the kernel's own verdict otherwise."""
    pos, size = int(batches.position[i]), int(batches.size[i])
    LegacyBatch(memoryview(file)[pos : pos + size], pos, path).records()
    raise CorruptRecordError(
        LEGACY_ERR_NAMES.get(code, f"legacy error {code}"),
        path=path,
        position=pos,
        offset=int(batches.last_offset[i]),
    )


def _merge(parts: list[RecordColumns], keys: list | None = None) -> tuple[RecordColumns, tuple | None]:
    """Concatenate the record columns of the three paths back into batch order, and with `keys`
    (per part: `_SubsetWalk.keys()`) their hashed keys too: in the merged keys, packed_offs[r] is
    where record r's key starts in the packed bytes, which are then no longer in record order."""
    live = [j for j, p in enumerate(parts) if len(p)]
    if len(live) <= 1:
        j = live[0] if live else 0
        return (parts[j] if live else _empty_records()), (keys[j] if keys is not None else None)
    cols = [np.concatenate([getattr(parts[j], f) for j in live]) for f in RECORD_FIELDS]
    order = np.argsort(cols[0], kind="stable")  # each part is already in order within itself
    records = RecordColumns(*(c[order] for c in cols), error_code=ERR_OK, error_position=-1, error_batch=-1)
    if keys is None:
        return records, None
    shift = np.cumsum([0] + [len(keys[j][1]) for j in live])
    hashes = np.concatenate([keys[j][0] for j in live])[order]
    packed = np.concatenate([keys[j][1] for j in live])
    starts = np.concatenate([keys[j][2][:-1] + shift[n] for n, j in enumerate(live)])[order]
    return records, (hashes, packed, np.append(starts, shift[-1]))
