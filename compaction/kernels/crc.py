"""The checksums of format/crc.py from inside numba kernels: `crc32_at` / `crc32c_at` over
buf[pos:pos + n], one call per message without a Python round trip.

A v0/v1 segment holds ~100k messages of ~600 bytes per 64 MiB, and a Python loop over them cost
more than the checksums themselves. They call the C functions the `isal` and `crc32c` packages are
built on, found by their exported names: ISA-L's `crc32_gzip_refl` (PCLMUL; `isal` is a
dependency for gzip) and crc32c's SSE4.2 / ARMv8 kernel. The call goes through a symbol registered
with LLVM under a name of our own, so the kernels stay cacheable (`cache=True`); where a library
does not export its function, a compiled table implementation is registered under that name
instead.
"""

from __future__ import annotations

import ctypes
import functools

import crc32c as _crc32c
import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import carray as _carray
from numba import cfunc as _cfunc
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from compaction.kernels.jit import njit as _njit

# raw(crc, pointer, length) -> crc, with each library's own convention (see crc32_at, crc32c_at)
_CRC32_SYMBOL = "compaction_crc32_gzip_refl"  # crc32_gzip_refl(prev, p, n): prev and result final
_CRC32C_SYMBOL = "compaction_crc32c_raw"  # no pre/post inversion: crc32c(d) = ~raw(~0, d)
_RAW_SIG = "uint32(uint32, voidptr, uint64)"


def _table(poly: int) -> np.ndarray:
    t = np.empty(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t[i] = c
    return t


_CRC32_TABLE = _table(0xEDB88320)
_CRC32C_TABLE = _table(0x82F63B78)


def _crc32_table_raw(prev, ptr, n):  # pragma: no cover - only where ISA-L exports no symbol
    data = _carray(ptr, (n,), dtype=np.uint8)
    c = ~np.uint32(prev)
    for i in range(n):
        c = _CRC32_TABLE[(c ^ data[i]) & 0xFF] ^ (c >> np.uint32(8))
    return ~c


def _crc32c_table_raw(prev, ptr, n):  # pragma: no cover - only where crc32c exports no symbol
    data = _carray(ptr, (n,), dtype=np.uint8)
    c = np.uint32(prev)
    for i in range(n):
        c = _CRC32C_TABLE[(c ^ data[i]) & 0xFF] ^ (c >> np.uint32(8))
    return c


@functools.cache
def _compiled(table_raw):
    """A table function as a C function, compiled once per process. Compiled only where a library
    lacks its symbol: compiling both at import was a good part of every process's start (the
    driver's and each worker's)."""
    return _cfunc(_RAW_SIG, cache=False)(table_raw)


def _exported(module, names: tuple[str, ...]) -> tuple[int, str] | tuple[None, str]:
    """(address, name) of the first of `names` the extension module's shared object exports."""
    try:
        lib = ctypes.CDLL(module.__file__)
    except (OSError, AttributeError, TypeError):
        return None, "table"
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return ctypes.cast(fn, ctypes.c_void_p).value, name
    return None, "table"


def _register_symbols() -> dict[str, str]:
    """Register both symbols; returns the C function (or "table") each one got."""
    from isal import isal_zlib

    crc32_fn, crc32_name = _exported(isal_zlib, ("crc32_gzip_refl",))
    _llvm.add_symbol(_CRC32_SYMBOL, crc32_fn or _compiled(_crc32_table_raw).address)
    # the SSE4.2 kernel where the package uses it (it set up its tables on import), else its software one
    hw = getattr(_crc32c, "hardware_based", False)
    names = ("_crc32c_hw_adler", "_crc32c_sw_slicing_by_8") if hw else ("_crc32c_sw_slicing_by_8",)
    crc32c_fn, crc32c_name = _exported(getattr(_crc32c, "_crc32c", None), names)
    _llvm.add_symbol(_CRC32C_SYMBOL, crc32c_fn or _compiled(_crc32c_table_raw).address)
    return {"crc32": crc32_name, "crc32c": crc32c_name}


IMPLEMENTATIONS = _register_symbols()


def _raw_call(symbol: str):
    @_intrinsic
    def call(typingctx, prev, buf, pos, n):
        if not (isinstance(buf, _types.Array) and buf.dtype == _types.uint8 and buf.ndim == 1):
            return None
        sig = _types.uint32(_types.uint32, buf, _types.int64, _types.int64)

        def codegen(context, builder, signature, args):
            c, b, p, count = args
            arr = context.make_array(signature.args[1])(context, builder, b)
            byte_ptr = _ir.IntType(8).as_pointer()
            i32, i64 = _ir.IntType(32), _ir.IntType(64)
            fnty = _ir.FunctionType(i32, [i32, byte_ptr, i64])
            fn = _cgutils.get_or_insert_function(builder.module, fnty, symbol)
            return builder.call(fn, [c, builder.bitcast(builder.gep(arr.data, [p]), byte_ptr), count])

        return sig, codegen

    return call


_crc32_raw = _raw_call(_CRC32_SYMBOL)
_crc32c_raw = _raw_call(_CRC32C_SYMBOL)


@_njit
def crc32_at(buf, pos, n):
    """IEEE CRC-32 of buf[pos:pos + n] (a 1-D uint8 array; the range must lie inside it)."""
    return _crc32_raw(np.uint32(0), buf, pos, n)


@_njit
def crc32c_at(buf, pos, n):
    """CRC-32C of buf[pos:pos + n] (a 1-D uint8 array; the range must lie inside it)."""
    return _crc32c_raw(np.uint32(0xFFFFFFFF), buf, pos, n) ^ np.uint32(0xFFFFFFFF)
