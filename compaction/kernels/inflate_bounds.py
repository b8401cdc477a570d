"""`inflate_bounds`: what `format/compression.py`'s `inflate_bound` returns, for many regions of a
buffer (a segment's compressed batches) in one compiled call.

The scan asks it of every compressed batch before decompressing it, to size the side buffer.
Walked in Python, an lz4 frame's 16 block headers (a 1 MiB batch in Kafka's 64 KiB blocks) cost
~40 us a batch, more than the rest of the Python around the batch's decompression. The kernel
walks the block headers of lz4 frames and zstd frames exactly as `_lz4_bound` and `_zstd_bound`
do; other codecs are left to `inflate_bound` itself (snappy declares its sizes in varints that
cramjam reads; gzip and uncompressed regions declare nothing). `inflate_bound` is the twin the
tests compare the kernel against.
"""

from __future__ import annotations

import numpy as np

from compaction.format.compression import (
    LZ4_BLOCK_HEADER_BYTES,
    LZ4_BLOCK_UNCOMPRESSED,
    LZ4_CHECKSUM_BYTES,
    LZ4_FLG_BLOCK_CHECKSUM,
    LZ4_FLG_CONTENT_CHECKSUM,
    ZSTD_BLOCK_MAX,
    ZSTD_MAGIC,
    ZSTD_SKIPPABLE_MAGIC,
    inflate_bound,
)
from compaction.format.layout import CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, MAGIC_V0, MAGIC_V2
from compaction.kernels.jit import borrow, njit
from compaction.kernels.lz4_frames import frame_header
from compaction.kernels.memops import le_uint

NO_BOUND = -1  # inflate_bound's None: the framing declares nothing the walk follows
_ASK_PYTHON = -2  # a codec the kernel does not walk


def inflate_bounds(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, codec: np.ndarray, magic: int = MAGIC_V2
):
    """Per region buf[start[j]:end[j]] (in bounds, start <= end) compressed with codec[j]:
    `inflate_bound(codec[j], buf[start[j]:end[j]], magic)`, None as NO_BOUND, as int64."""
    start = np.ascontiguousarray(start, np.int64)
    end = np.ascontiguousarray(end, np.int64)
    codec = np.ascontiguousarray(codec, np.int64)
    out = np.empty(len(start), dtype=np.int64)
    _bounds_kernel(buf, start, end, codec, int(magic), out)
    for j in np.flatnonzero(out == _ASK_PYTHON).tolist():
        bound = inflate_bound(int(codec[j]), memoryview(buf)[start[j] : end[j]], magic)
        out[j] = NO_BOUND if bound is None else bound
    return out


@njit
def _bounds_kernel(buf, start, end, codec, magic, out):
    buf, start, end, codec, out = borrow(buf), borrow(start), borrow(end), borrow(codec), borrow(out)
    for j in range(len(start)):
        c = codec[j]
        if c == CODEC_LZ4:
            out[j] = NO_BOUND if magic == MAGIC_V0 else _lz4_bound(buf, start[j], end[j])
        elif c == CODEC_ZSTD:
            out[j] = _zstd_bound(buf, start[j], end[j]) if magic == MAGIC_V2 else NO_BOUND
        elif c == CODEC_SNAPPY:
            out[j] = _ASK_PYTHON
        else:  # gzip and uncompressed data declare nothing
            out[j] = NO_BOUND


@njit
def _lz4_bound(buf, lo, hi):
    """`compression._lz4_bound` of buf[lo:hi]."""
    n = hi - lo
    pos, block_max, flg = frame_header(buf, lo, hi)
    if pos < 0:
        return NO_BOUND
    trailer = LZ4_CHECKSUM_BYTES if flg & LZ4_FLG_BLOCK_CHECKSUM else 0
    total = 0
    while True:
        if n - pos < LZ4_BLOCK_HEADER_BYTES:
            return NO_BOUND
        word = le_uint(buf, lo + pos, LZ4_BLOCK_HEADER_BYTES)
        pos += LZ4_BLOCK_HEADER_BYTES
        if word == 0:
            break
        size = word & (LZ4_BLOCK_UNCOMPRESSED - 1)
        total += size if word & LZ4_BLOCK_UNCOMPRESSED else block_max
        pos += size + trailer
    if flg & LZ4_FLG_CONTENT_CHECKSUM:
        pos += LZ4_CHECKSUM_BYTES
    return total if pos == n else NO_BOUND


@njit
def _zstd_bound(buf, lo, hi):
    """`compression._zstd_bound` of buf[lo:hi]."""
    n, pos, total = hi - lo, 0, 0
    while pos < n:
        if n - pos < 5:
            return NO_BOUND
        magic = le_uint(buf, lo + pos, 4)
        if magic & ~0xF == ZSTD_SKIPPABLE_MAGIC:
            if n - pos < 8:
                return NO_BOUND
            pos += 8 + le_uint(buf, lo + pos + 4, 4)
            continue
        if magic != ZSTD_MAGIC:
            return NO_BOUND
        fhd = np.int64(buf[lo + pos + 4])
        single = (fhd >> 5) & 1
        dict_id = fhd & 3
        fcs = fhd >> 6
        pos += 5 + (1 - single) + (4 if dict_id == 3 else dict_id) + (single if fcs == 0 else 1 << fcs)
        while True:
            if n - pos < 3:
                return NO_BOUND
            header = le_uint(buf, lo + pos, 3)
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:  # reserved
                return NO_BOUND
            total += ZSTD_BLOCK_MAX if kind == 2 else size
            pos += 3 + (1 if kind == 1 else size)
            if header & 1:
                break
        pos += 4 * ((fhd >> 2) & 1)  # content checksum
    return total if pos == n else NO_BOUND
