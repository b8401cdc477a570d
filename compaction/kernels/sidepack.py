"""Pack a scanned segment's decompressed records down to those the rewrite may keep.

A whole-partition task scans every segment before it rewrites any (the offset map must be
complete), and keeps each segment's `SegmentScan` for the rewrite so that compressed batches are
not decompressed twice. Held whole, the decompressed records (`SegmentScan.side`) of a compressed
partition are about twice its size on disk, all fresh memory: page faults and system time for
each first task of a worker (what a first touch costs: bench/fresh_memory.py). But
the scan runs newest segment first, so once a segment is scanned the latest offset of each of its
keys is final (`scan.scan_partition`), and most of its records are known to be dropped. This
module copies the others into a buffer of their size; the full one goes back to the pool
for the next segment.

Layout of the packed `side` (what `rebuild.record_regions` and the rebuild kernel read): the
batches' regions stay back to back in file order from side offset 0; a region holds, for each
record copied, the bytes from its key to the end of its headers (key, value length, value,
headers: the rest of the record the rebuild re-encodes from the columns). A batch's last record
is always copied, so the region still ends where its last record's headers end, the check both
`record_regions` and the rebuild make. A record not copied gets `FAR` as key and value position:
the rebuild's layout check fails on it, so a decision that would keep it is an error, never
bytes read from elsewhere.

Only segments whose side holds nothing but data batches outside transactions are packed (legacy
wrapper contents, transactional and control batches keep their whole side): for those the rewrite
decides per batch in ways this superset does not cover.

`pack_records` (numba) and `pack_records_py` (plain Python reference) share one signature.
"""

from __future__ import annotations

import numpy as np

from compaction.errors import CorruptRecordError, KafkaFormatError
from compaction.format.layout import (
    COMPRESSION_CODEC_MASK,
    CONTROL_MASK,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_MASK,
)
from compaction.format.varint import read_varint
from compaction.kernels.buffers import POOL, POOLED_MIN_BYTES
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import memcpy_at
from compaction.kernels.scan import RecordColumns, SegmentScan
from compaction.kernels.scan_kernels import _skip_headers

FAR = np.int64(1) << np.int64(62)  # the position of a record not copied: past any buffer
ERR_OK, ERR_LAYOUT = 0, 1
_NO_BYTES = np.empty(0, np.uint8)
PACKED_SLACK = 2  # a packed side takes a pool buffer of at most this many times its size


@_njit
def pack_records(side, split, first, last, keep, key_pos, key_len, value_pos, value_len, out, copy):
    """Copy records first[j] .. last[j] - 1 of each region j (the kept ones and each region's
    last) from `side` into `out`, back to back; rewrites their `key_pos`/`value_pos` (combined
    positions: side starts at `split`) and sets FAR for the others. Returns (err, region, bytes
    used). Without `copy`, only the bytes the copy would use are counted (nothing is written, `out`
    is not read): what `out` must hold."""
    side, out = borrow(side), borrow(out)
    o = np.int64(0)
    n_side = len(side)
    for j in range(len(first)):
        for r in range(first[j], last[j]):
            if not keep[r] and r != last[j] - 1:
                if copy:
                    key_pos[r] = FAR
                    value_pos[r] = FAR
                continue
            kp = key_pos[r] - split
            vp = value_pos[r] - split
            hpos = vp + max(value_len[r], 0)
            if kp < 0 or vp < kp + max(key_len[r], 0) or hpos >= n_side:
                return ERR_LAYOUT, j, o
            end = _skip_headers(side, hpos, n_side)
            if end < 0:
                return ERR_LAYOUT, j, o
            n = end - kp
            if copy:
                memcpy_at(out, o, side, kp, n)
                key_pos[r] = split + o
                value_pos[r] = split + o + (vp - kp)
            o += n
    return ERR_OK, -1, o


def pack_records_py(side, split, first, last, keep, key_pos, key_len, value_pos, value_len, out, copy):
    """Plain-Python `pack_records`, the reference the tests compare it with."""
    raw, o = bytes(side), 0
    for j in range(len(first)):
        for r in range(int(first[j]), int(last[j])):
            if not keep[r] and r != last[j] - 1:
                if copy:
                    key_pos[r] = value_pos[r] = FAR
                continue
            kp, vp = int(key_pos[r]) - split, int(value_pos[r]) - split
            hpos = vp + max(int(value_len[r]), 0)
            if kp < 0 or vp < kp + max(int(key_len[r]), 0) or hpos >= len(side):
                return ERR_LAYOUT, j, o
            end = _headers_end_py(raw, hpos)
            if end < 0:
                return ERR_LAYOUT, j, o
            if copy:
                out[o : o + end - kp] = side[kp:end]
                key_pos[r], value_pos[r] = split + o, split + o + (vp - kp)
            o += end - kp
    return ERR_OK, -1, o


def _headers_end_py(buf, pos: int) -> int:
    """End of the headers that start at `pos` (-1 when they do not parse)."""
    try:
        count, pos = read_varint(buf, pos)
        if count < 0:
            return -1
        for _ in range(count):
            for least in (0, -1):  # header key length, then value length (-1: null value)
                n, pos = read_varint(buf, pos)
                if n < least:
                    return -1
                pos += max(n, 0)
    except (IndexError, ValueError, KafkaFormatError):
        return -1
    return pos if pos <= len(buf) else -1


def packable(scan: SegmentScan) -> np.ndarray | None:
    """The indexes of the batches whose records live in `side` when every one of them is a v2
    data batch outside transactions (else None: the scan is not packed)."""
    b = scan.batches
    if not len(scan.side) or (b.magic < MAGIC_V2).any():
        return None
    attrs = b.attributes.astype(np.int64)
    in_side = (attrs & COMPRESSION_CODEC_MASK != 0) & (b.size > RECORD_BATCH_OVERHEAD)
    if (in_side & ((attrs & (TRANSACTIONAL_MASK | CONTROL_MASK)) != 0)).any():
        return None
    return np.flatnonzero(in_side)


def pack_side(scan: SegmentScan, may_keep: np.ndarray, kernel=pack_records) -> SegmentScan | None:
    """`scan` with a side holding only the records `may_keep` marks (and each batch's last),
    or None when it is not packable (`packable`) or every record may be kept."""
    idx = packable(scan)
    if idx is None or may_keep.all():
        return None
    rec = scan.records
    bounds = np.searchsorted(rec.batch_index, np.arange(len(scan.batches) + 1))
    first, last = bounds[idx].astype(np.int64), bounds[idx + 1].astype(np.int64)
    key_pos, value_pos = rec.key_pos.copy(), rec.value_pos.copy()
    keep = np.ascontiguousarray(may_keep, np.bool_)
    args = (
        scan.side,
        np.int64(scan.split),
        first,
        last,
        keep,
        key_pos,
        rec.key_len,
        value_pos,
        rec.value_len,
    )
    # Counted first, then copied into a buffer of that size: the packed side is held until the
    # rewrite (scan.ScanCache counts its allocation), where a whole side's room would hold several
    # times what it needs. From the pool: once the rewrite drops it, its pages serve the rewrite's
    # own buffers instead of fresh ones. Not from a free buffer of more than twice its size (a
    # previous segment's whole side): the cache would count all of it, and fill with a few small
    # packed sides while the older segments' scans, the smallest, found no room.
    err, j, used = kernel(*args, _NO_BYTES, False)
    if err == ERR_OK:
        big = used >= POOLED_MIN_BYTES
        out = POOL.take(used, most=PACKED_SLACK * used) if big else np.empty(used, np.uint8)
        err, j, used = kernel(*args, out, True)
    if err != ERR_OK:
        i = int(idx[j])
        raise CorruptRecordError(
            "a record's layout in the decompressed records does not match the scan",
            path=scan.path,
            position=int(scan.batches.position[i]),
            offset=int(scan.batches.base_offset[i]),
        )
    packed = RecordColumns(
        rec.batch_index,
        rec.offset,
        rec.timestamp,
        key_pos,
        rec.key_len,
        value_pos,
        rec.value_len,
        rec.error_code,
        rec.error_position,
        rec.error_batch,
    )
    return SegmentScan(scan.path, scan.file, out, scan.batches, packed, scan.keys)
