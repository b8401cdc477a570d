"""`memcpy_at`: a byte copy between two uint8 arrays inside numba kernels, compiled to LLVM's
`llvm.memcpy` (libc's memcpy or inline moves).

Why not a slice assignment or a byte loop: numba compiles both to a loop over single bytes that
LLVM does not vectorise (the arrays may overlap), a fraction of memcpy's speed. Worse,
a loop of tens of iterations per record fills the CPU's out-of-order window, so the cache miss on
the next record's bytes only starts when the current record is done: copying 24-byte keys from
random positions of a segment waited for one memory latency each. With `memcpy_at` the value
copies run at memcpy's speed (bench/rewrite.py measures the rewrite they sit in). It is an intrinsic
rather than a ctypes call to libc so that kernels using it stay cacheable (`cache=True`).

`put_be32` / `put_be64` write big-endian integers, as Kafka's headers hold them.
`copy_bytes` copies from the combined address space of a `SegmentScan` (file, then side).
`load_le64` / `load_le32` read a little-endian integer from any byte position of a uint8 array
in one (unaligned) load, where a loop over its bytes costs one load, shift and or per byte: for
kernels that hash or compare keys a word at a time.
`prefetch` asks the CPU to bring an array element's cache line in (LLVM's `llvm.prefetch`): for
kernels whose loads depend on one another, which out-of-order execution cannot overlap.
`prefetch_ahead` does so for the next `PREFETCH_BYTES` of a walk over a log from start to end:
each entry's (or message's) length gives the next one's position, so without it every entry of
a segment just read from the disk waits for its own memory access (v0 messages of ~600 bytes).

No bounds checks, as with numba's own indexing: callers pass ranges they have checked.
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from compaction.kernels.jit import njit

_BIG_ENDIAN = sys.byteorder == "big"  # a native load is byte-swapped to read little-endian


@intrinsic
def memcpy_at(typingctx, dst, dst_pos, src, src_pos, n):
    """dst[dst_pos:dst_pos + n] = src[src_pos:src_pos + n] (1-D contiguous uint8 arrays; the
    ranges must not overlap)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array)):
        return None
    if dst.dtype != types.uint8 or src.dtype != types.uint8 or dst.ndim != 1 or src.ndim != 1:
        return None
    sig = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        d, d_pos, s, s_pos, count = args
        d_arr = context.make_array(signature.args[0])(context, builder, d)
        s_arr = context.make_array(signature.args[2])(context, builder, s)
        to = builder.gep(d_arr.data, [d_pos])
        frm = builder.gep(s_arr.data, [s_pos])
        cgutils.raw_memcpy(builder, to, frm, count, 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, index):
    """Hint: arr[index] will be read soon (any 1-D array; no effect on results, never faults)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(index, types.Integer):
        return None
    sig = types.void(arr, types.int64)

    def codegen(context, builder, signature, args):
        a, i = args
        ary = context.make_array(signature.args[0])(context, builder, a)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # read (0), keep in all cache levels (3), data cache (1)
        builder.call(fn, [builder.bitcast(builder.gep(ary.data, [i]), byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


def _load_le(bits: int, result):
    def typer(typingctx, arr, pos):
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and arr.ndim == 1):
            return None
        if not isinstance(pos, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            a, i = args
            ary = context.make_array(signature.args[0])(context, builder, a)
            i = context.cast(builder, i, signature.args[1], types.int64)
            word = ir.IntType(bits)
            ptr = builder.bitcast(builder.gep(ary.data, [i]), word.as_pointer())
            v = builder.load(ptr, align=1)
            if _BIG_ENDIAN:
                fn = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(word, [word]), f"llvm.bswap.i{bits}"
                )
                v = builder.call(fn, [v])
            return builder.zext(v, ir.IntType(64)) if bits < 64 else v

        return result(arr, pos), codegen

    return typer


load_le64 = intrinsic(_load_le(64, types.uint64))
load_le64.__doc__ = "arr[pos:pos + 8] as a little-endian uint64 (1-D contiguous uint8 array)."
load_le32 = intrinsic(_load_le(32, types.uint64))
load_le32.__doc__ = "arr[pos:pos + 4] as a little-endian unsigned integer, as uint64 (1-D contiguous uint8)."


@njit
def le_uint(buf, pos, n):
    """The n-byte (n <= 7) little-endian unsigned integer at buf[pos], as int64."""
    v = 0
    for i in range(n - 1, -1, -1):
        v = (v << 8) | np.int64(buf[pos + i])
    return v


PREFETCH_BYTES = 4096  # how far ahead of a sequential walk its bytes are asked for
_LINE = 64  # bytes per cache line


@njit
def prefetch_ahead(buf, ahead, pos, end):
    """Hint the cache lines of buf[max(ahead, pos):min(pos + PREFETCH_BYTES, end)] (a walk at `pos`
    whose hints reached `ahead`); returns where the hints now reach. A walk that stepped farther
    than PREFETCH_BYTES past its hints gets none (its entries are bigger than the window: v2
    batches, whose bytes between headers the walk does not read); it gets them again once its
    steps are small."""
    if pos - ahead > PREFETCH_BYTES:
        return pos
    a = max(ahead, pos)
    limit = min(pos + PREFETCH_BYTES, end)
    while a < limit:
        prefetch(buf, a)
        a += _LINE
    return a


@njit
def put_be32(out, pos, value):
    """out[pos:pos + 4] = `value` as a big-endian 32-bit integer (its low 32 bits)."""
    v = np.int64(value)
    for i in range(4):
        out[pos + i] = np.uint8((v >> (24 - 8 * i)) & 0xFF)


@njit
def put_be64(out, pos, value):
    """out[pos:pos + 8] = `value` as a big-endian 64-bit integer."""
    v = np.int64(value)
    for i in range(8):
        out[pos + i] = np.uint8((v >> (56 - 8 * i)) & 0xFF)


@njit
def copy_bytes(file, side, split, pos, n, out, dst):
    """out[dst:dst+n] = the n bytes at combined position `pos` (>= split: in `side`)."""
    if pos >= split:
        memcpy_at(out, dst, side, pos - split, n)
    else:
        memcpy_at(out, dst, file, pos, n)
