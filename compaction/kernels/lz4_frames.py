"""LZ4 frames as Kafka's producers write them, decoded in one compiled call per batch, each block
straight into place by liblz4's block decoder (`LZ4_decompress_safe`, exported by the extension
module python-lz4's `lz4.block` is built on).

    frame  magic 04 22 4D 18 | FLG | BD | [content size: 8, LE] | HC | block ... | end mark 00 00 00 00
    FLG    version 01 (bits 7-6) | independent blocks (5) | block checksum (4) | content size (3)
           | content checksum (2) | dictionary id (0)
    BD     block maximum size (bits 6-4): 4 = 64 KiB, 5 = 256 KiB, 6 = 1 MiB, 7 = 4 MiB
    HC     (xxHash32 of FLG up to the byte before HC) >> 8 & 0xFF
    block  size: 4, LE (bit 31: stored as is) | that many bytes

Kafka's Java producer writes FLG 0x60, BD 0x40 (independent 64 KiB blocks, no checksums), as the
rewrite does (`compression._lz4_compress`); librdkafka adds the content size. A frame decoder
(cramjam's, python-lz4's) decodes each block into a buffer of its own and copies it out: a batch
of 1 MiB is 16 blocks, and a copy each on top of the decoding.

The kernel takes only the frames it decodes exactly as the frame decoder would: version 01,
independent blocks, no checksum but HC (which it checks), no dictionary, a content size that
matches, each block within the block maximum and the room given, and nothing after the end mark.
Anything else, a block liblz4 refuses included, is FALLBACK: the caller decodes the batch with
`compression.inflate_into`, which reads it or raises the typed error. So the kernel never decides
that a frame is corrupt, and the library path stays the reference the tests compare it with.
Where the extension module exports no such symbol, a stand-in that refuses every block is
registered instead: every frame falls back.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import cfunc as _cfunc
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from compaction.format.compression import (
    LZ4_BD_OFFSET,
    LZ4_BLOCK_HEADER_BYTES,
    LZ4_BLOCK_MAX,
    LZ4_BLOCK_UNCOMPRESSED,
    LZ4_CONTENT_SIZE_BYTES,
    LZ4_DICT_ID_BYTES,
    LZ4_FLG_BLOCK_CHECKSUM,
    LZ4_FLG_BLOCK_INDEPENDENT,
    LZ4_FLG_CONTENT_CHECKSUM,
    LZ4_FLG_CONTENT_SIZE,
    LZ4_FLG_DICT_ID,
    LZ4_FLG_OFFSET,
    LZ4_FLG_VERSION,
    LZ4_FRAME_MAGIC,
    LZ4_MIN_HEADER,
)
from compaction.kernels.jit import borrow, njit
from compaction.kernels.memops import le_uint, memcpy_at

FALLBACK = -1  # a frame the kernel does not decode: the caller's library path does
_FLG_VERSION_MASK = 0xC0
_FLG_REFUSED = LZ4_FLG_BLOCK_CHECKSUM | LZ4_FLG_CONTENT_CHECKSUM | LZ4_FLG_DICT_ID
_BD_BLOCK_MAX_SHIFT, _BD_BLOCK_MAX_MASK = 4, 7
_LZ4_MAGIC = int.from_bytes(LZ4_FRAME_MAGIC, "little")
_BLOCK_MAX = np.array([LZ4_BLOCK_MAX.get(i, 0) for i in range(8)], dtype=np.int64)

# xxHash32 primes and the 32-bit mask, as uint64 so that numba keeps the arithmetic unsigned
_P1, _P2, _P3, _P4, _P5 = (np.uint64(p) for p in (2654435761, 2246822519, 3266489917, 668265263, 374761393))
_M32 = np.uint64(0xFFFFFFFF)

_SYMBOL = "compaction_lz4_decompress_safe"  # int LZ4_decompress_safe(src, dst, srcSize, dstCapacity)
_SIG = "int32(voidptr, voidptr, int32, int32)"


def _refuse_all(src, dst, n, cap):  # pragma: no cover - only where lz4.block exports no symbol
    return -1


def _register_symbol() -> str:
    """Register the block decoder under our own name (the kernels stay cacheable); returns the C
    function it is, or "fallback"."""
    from lz4.block import _block

    try:
        fn = getattr(ctypes.CDLL(_block.__file__), "LZ4_decompress_safe", None)
    except (OSError, AttributeError, TypeError):
        fn = None
    if fn is not None:
        _llvm.add_symbol(_SYMBOL, ctypes.cast(fn, ctypes.c_void_p).value)
        return "LZ4_decompress_safe"
    _llvm.add_symbol(_SYMBOL, _cfunc(_SIG, cache=False)(_refuse_all).address)
    return "fallback"


IMPLEMENTATION = _register_symbol()


@_intrinsic
def _decompress_block(typingctx, src, spos, n, dst, dpos, cap):
    """LZ4_decompress_safe(src + spos, dst + dpos, n, cap): the bytes written, or < 0."""
    for arr in (src, dst):
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.uint8 and arr.ndim == 1):
            return None
    sig = _types.int32(src, _types.int64, _types.int64, dst, _types.int64, _types.int64)

    def codegen(context, builder, signature, args):
        s, sp, count, d, dp, room = args
        byte_ptr, i32 = _ir.IntType(8).as_pointer(), _ir.IntType(32)
        src_arr = context.make_array(signature.args[0])(context, builder, s)
        dst_arr = context.make_array(signature.args[3])(context, builder, d)
        fnty = _ir.FunctionType(i32, [byte_ptr, byte_ptr, i32, i32])
        fn = _cgutils.get_or_insert_function(builder.module, fnty, _SYMBOL)
        return builder.call(
            fn,
            [
                builder.bitcast(builder.gep(src_arr.data, [sp]), byte_ptr),
                builder.bitcast(builder.gep(dst_arr.data, [dp]), byte_ptr),
                builder.trunc(count, i32),
                builder.trunc(room, i32),
            ],
        )

    return sig, codegen


@njit
def frame_header(buf, lo, hi):
    """(where the first block starts, from lo; the block maximum size; FLG) of the LZ4 frame at
    buf[lo:hi], or (-1, 0, 0) where it is not a frame of independent blocks of a known size, of
    version 01, long enough for its descriptor."""
    n = hi - lo
    if n < LZ4_MIN_HEADER or le_uint(buf, lo, 4) != _LZ4_MAGIC:
        return -1, 0, 0
    flg = np.int64(buf[lo + LZ4_FLG_OFFSET])
    block_max = _BLOCK_MAX[(np.int64(buf[lo + LZ4_BD_OFFSET]) >> _BD_BLOCK_MAX_SHIFT) & _BD_BLOCK_MAX_MASK]
    if flg & _FLG_VERSION_MASK != LZ4_FLG_VERSION or block_max == 0 or not flg & LZ4_FLG_BLOCK_INDEPENDENT:
        return -1, 0, 0
    pos = LZ4_MIN_HEADER
    if flg & LZ4_FLG_CONTENT_SIZE:
        pos += LZ4_CONTENT_SIZE_BYTES
    if flg & LZ4_FLG_DICT_ID:
        pos += LZ4_DICT_ID_BYTES
    if pos > n:
        return -1, 0, 0
    return pos, block_max, flg


@njit
def _rotl(x, r):
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


@njit
def _xxh32_short(buf, pos, n):
    """xxHash32 (seed 0) of buf[pos:pos + n], n < 16: all a frame descriptor's checksum covers
    (`compression.xxh32`, its twin)."""
    h = (_P5 + np.uint64(n)) & _M32
    i = 0
    while i + 4 <= n:
        h = (h + np.uint64(le_uint(buf, pos + i, 4)) * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (h + np.uint64(buf[pos + i]) * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * _P2) & _M32
    h ^= h >> np.uint64(13)
    h = (h * _P3) & _M32
    return np.int64(h ^ (h >> np.uint64(16)))


@njit
def lz4_frame_into(src, lo, hi, out, at, room):
    """Decode the LZ4 frame src[lo:hi] into out[at:at + room] (both 1-D uint8, the ranges inside
    them); the bytes written, or FALLBACK (see the module docstring)."""
    src, out = borrow(src), borrow(out)
    n = hi - lo
    pos, block_max, flg = frame_header(src, lo, hi)
    if pos < 0 or flg & _FLG_REFUSED:
        return FALLBACK
    hc = pos - 1  # no dictionary id: the HC byte right after the content size, if any
    content = -1
    if flg & LZ4_FLG_CONTENT_SIZE:
        if src[lo + hc - 1] != 0:  # a size of 2^56 or more: not one a batch decodes to
            return FALLBACK
        content = le_uint(src, lo + hc - LZ4_CONTENT_SIZE_BYTES, LZ4_CONTENT_SIZE_BYTES - 1)
    if (_xxh32_short(src, lo + LZ4_FLG_OFFSET, hc - LZ4_FLG_OFFSET) >> 8) & 0xFF != src[lo + hc]:
        return FALLBACK
    o = 0
    while True:
        if n - pos < LZ4_BLOCK_HEADER_BYTES:
            return FALLBACK
        word = le_uint(src, lo + pos, LZ4_BLOCK_HEADER_BYTES)
        pos += LZ4_BLOCK_HEADER_BYTES
        if word == 0:
            break
        size = word & (LZ4_BLOCK_UNCOMPRESSED - 1)
        if size > n - pos:
            return FALLBACK
        if word & LZ4_BLOCK_UNCOMPRESSED:
            if size > block_max or size > room - o:
                return FALLBACK
            memcpy_at(out, at + o, src, lo + pos, size)
            o += size
        else:
            got = _decompress_block(src, lo + pos, size, out, at + o, min(block_max, room - o))
            if got < 0:
                return FALLBACK
            o += got
        pos += size
    if pos != n or (content >= 0 and content != o):
        return FALLBACK
    return o


__all__ = ["FALLBACK", "IMPLEMENTATION", "frame_header", "lz4_frame_into"]
