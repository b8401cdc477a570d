"""The headers of v2 records, for readers that show them (the `kafka_log` data source).

A v2 record ends with its headers (docs/kafka-rules.md#varints, drawn in `kernels/scan.py`):

    ... | valueLength varint | value | headersCount varint
    | headersCount x (keyLength varint >= 0 | key | valueLength varint >= -1 | value)

The scan validated every record, headers included (`scan_kernels._skip_headers`), and left where
each value starts (`value_pos`, in the scan's combined file + side address space); the headers
start right after the value. `walk_headers` returns, per record asked for, its header count and,
per header, where its key and value lie (positions in the same address space), so the caller
gathers them into Arrow columns without a Python object per header. `walk_headers_py` is its
plain-Python twin. Legacy (v0/v1) records have no headers: the caller passes `has_headers` False.
"""

from __future__ import annotations

import numpy as np

from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.scan_kernels import _read_varint


@_njit
def _varint_at(file, side, split, pos):
    """A zig-zag varint at a combined position: (value, next combined position)."""
    if pos < split:
        value, nxt = _read_varint(file, pos, split)
        return value, nxt
    value, nxt = _read_varint(side, pos - split, len(side))
    return value, nxt + split


@_njit
def _count_kernel(file, side, split, start, has_headers, counts):
    file, side = borrow(file), borrow(side)
    total = 0
    for i in range(len(start)):
        if not has_headers[i]:
            counts[i] = 0
            continue
        n, _ = _varint_at(file, side, split, start[i])
        counts[i] = n
        total += n
    return total


@_njit
def _fill_kernel(file, side, split, start, counts, key_pos, key_len, value_pos, value_len):
    file, side = borrow(file), borrow(side)
    k = 0
    for i in range(len(start)):
        if counts[i] == 0:
            continue
        _, pos = _varint_at(file, side, split, start[i])
        for _ in range(counts[i]):
            klen, pos = _varint_at(file, side, split, pos)
            key_pos[k] = pos
            key_len[k] = klen
            pos += klen
            vlen, pos = _varint_at(file, side, split, pos)
            value_pos[k] = pos
            value_len[k] = vlen
            if vlen > 0:
                pos += vlen
            k += 1


def header_starts(value_pos: np.ndarray, value_len: np.ndarray) -> np.ndarray:
    """Where each record's headers count lies: right after its value (none for a tombstone)."""
    return value_pos.astype(np.int64) + np.maximum(value_len, 0)


def walk_headers(file, side, split, start, has_headers):
    """(counts int32 per record, key_pos int64, key_len int32, value_pos int64, value_len int32
    per header) of the records whose headers start at `start` (combined positions)."""
    start = np.ascontiguousarray(start, dtype=np.int64)
    has_headers = np.ascontiguousarray(has_headers, dtype=np.bool_)
    counts = np.empty(len(start), np.int32)
    total = _count_kernel(file, side, split, start, has_headers, counts)
    cols = tuple(np.empty(total, dt) for dt in (np.int64, np.int32, np.int64, np.int32))
    _fill_kernel(file, side, split, start, counts, *cols)
    return (counts, *cols)


def walk_headers_py(file, side, split, start, has_headers):
    """The plain-Python twin of `walk_headers` (same results)."""

    def varint(pos: int) -> tuple[int, int]:
        buf, at = (file, pos) if pos < split else (side, pos - split)
        raw, shift = 0, 0
        while True:
            b = int(buf[at])
            at += 1
            raw |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        raw &= 0xFFFFFFFF
        value = (raw >> 1) ^ -(raw & 1)
        return value, at + (0 if pos < split else split)

    counts, kp, kl, vp, vl = [], [], [], [], []
    for s, has in zip(start, has_headers):
        if not has:
            counts.append(0)
            continue
        n, pos = varint(int(s))
        counts.append(n)
        for _ in range(n):
            klen, pos = varint(pos)
            kp.append(pos)
            kl.append(klen)
            pos += klen
            vlen, pos = varint(pos)
            vp.append(pos)
            vl.append(vlen)
            pos += max(vlen, 0)
    return (
        np.array(counts, np.int32),
        np.array(kp, np.int64),
        np.array(kl, np.int32),
        np.array(vp, np.int64),
        np.array(vl, np.int32),
    )
