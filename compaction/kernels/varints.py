"""Compiled zig-zag varint sizes and writers, as Kafka's `ByteUtils` writes them (shortest form):
shared by the kernels that encode v2 records (`rebuild_kernels`, `upconvert`)."""

from __future__ import annotations

import numpy as np

from compaction.kernels.jit import njit as _njit


@_njit
def _varint_size(v):
    """Bytes of the zig-zag varint of an int32 (or of a varlong: same formula on int64)."""
    z = np.uint64((np.int64(v) << 1) ^ (np.int64(v) >> 63))
    n = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        n += 1
    return n


@_njit
def _zigzag32(v):
    """Zig-zag of an int32 value as Java computes it: only the low 32 bits are kept."""
    return np.uint64(((np.int64(v) << 1) ^ (np.int64(v) >> 31)) & 0xFFFFFFFF)


@_njit
def _write_unsigned(out, pos, z):
    while z >= np.uint64(0x80):
        out[pos] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(z)
    return pos + 1


@_njit
def _write_varint(out, pos, v):
    return _write_unsigned(out, pos, _zigzag32(v))


@_njit
def _write_varlong(out, pos, v):
    return _write_unsigned(out, pos, np.uint64((np.int64(v) << 1) ^ (np.int64(v) >> 63)))


@_njit
def _varint32_size(v):
    z = _zigzag32(v)
    n = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        n += 1
    return n
