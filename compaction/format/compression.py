"""The five compression codecs with the framing Kafka reads and writes (docs/kafka-rules.md#compression).

A codec applies to the records region of a v2 batch (bytes 61..end) or to the value of a legacy
wrapper message. Kafka sources: `clients/.../common/compress/{GzipCompression, SnappyCompression,
Lz4Compression, Lz4BlockOutputStream, Lz4BlockInputStream, ZstdCompression}.java`,
`CompressionType.java`.

| id | codec  | framing on the wire                                                              |
|----|--------|----------------------------------------------------------------------------------|
| 0  | none   | raw bytes                                                                        |
| 1  | gzip   | one RFC 1952 member (reader accepts concatenated members like GZIPInputStream)   |
|    |        | written by ISA-L (igzip) level 3, not java.util.zip's level 6: same format       |
| 2  | snappy | xerial snappy-java stream (below), NOT the official "sNaPpY" framing              |
| 3  | lz4    | LZ4 frame, independent 64 KiB blocks, no content size/checksum                   |
| 4  | zstd   | one zstd frame, level 3; may lack the content size, so decode by streaming       |

xerial snappy stream (`SnappyOutputStream`, `SnappyCodec`):

| offset | size | field                                                  |
|-------:|-----:|--------------------------------------------------------|
| 0      | 8    | magic `82 53 4E 41 50 50 59 00`                        |
| 8      | 4    | int32 BE version (1)                                   |
| 12     | 4    | int32 BE minimum compatible version (1)                |
| 16     | 4    | int32 BE chunk length, then one raw snappy block of    |
|        |      | at most 32 KiB of input; repeated to the end           |

The reader also takes a bare raw snappy block (no magic) and concatenated xerial streams.

LZ4 frame header (`Lz4BlockOutputStream.writeHeader`): magic `04 22 4D 18` (LE 0x184D2204), FLG,
BD, HC = second byte of xxhash32(FLG..end of descriptor). Magic v0 messages carry a "broken" HC
computed over magic+FLG+BD (`useBrokenFlagDescriptorChecksum`); Kafka's v0 reader skips the check,
so we patch the byte before handing the frame to liblz4.

zstd is illegal inside v0/v1 messages (`MemoryRecordsBuilder`, `DeepRecordsIterator`).

Inflating is bounded (`inflate`): a batch's records may inflate to at most `limit` bytes
(`settings.MAX_INFLATED_BATCH_BYTES`), else `InflateLimitError`, found with at most `limit` +
one piece inflated. Kafka's own readers stream a batch's records and never hold them; here a
batch is held inflated, so what it may claim is bounded instead. A batch whose worst case (its
compressed size times the codec's largest ratio, or for zstd what its block headers allow, for
snappy what its chunk headers declare) fits one piece is inflated in one call, as before; a
bigger one in pieces of PIECE_BYTES, each its own mapping, so that copying them into the scan's
side buffer frees each piece as it goes and the batch is never held twice.

| codec  | largest output per input byte                                              |
|--------|-----------------------------------------------------------------------------|
| gzip   | 1032 (deflate: a 258-byte match in 2 bits)                                  |
| lz4    | 255 (a match length byte of 255), 256 counted; or, read from a frame's block  |
|        | headers, each block at most its BD block maximum size (64 KiB as Kafka writes) |
| zstd   | a block regenerates at most 128 KiB (Block_Maximum_Size); an RLE block is 4 bytes |
| snappy | each raw block starts with its uncompressed length (a varint): read, not bounded |

`inflate_bound` gives that worst case where the framing declares it (zstd, lz4, snappy), and
`inflate_into` decompresses into a buffer of that size the caller provides (the scan's side
buffer, so the records are not inflated into fresh memory and copied again). The caller caps
the bound by the limit before providing the buffer; the decoders stop at the buffer's end, and
input that would pass it is decoded again by `inflate` for its typed error.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

import cramjam
import lz4.frame
import zstandard
from isal import igzip, isal_zlib

from compaction.errors import CorruptRecordError, InflateLimitError, UnsupportedCodecError
from compaction.format.layout import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    MAGIC_V0,
    MAGIC_V2,
)
from compaction.settings import MAX_INFLATED_BATCH_BYTES

if TYPE_CHECKING:
    from typing_extensions import Buffer

# Decompressed output: one buffer, or pieces of about PIECE_BYTES (see `inflate`).
Pieces = list[bytes | bytearray]

CODEC_NAMES = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}

# Kafka writes zlib level 6 (Deflater.DEFAULT_COMPRESSION); ISA-L's levels are 0-3, and its 3
# matches zlib 6's ratio on record data at several times the speed (bench/gzip_libs.py). Any
# level decodes the same.
GZIP_LEVEL = 3
ZSTD_LEVEL = 3  # CompressionType.ZSTD default level

# --- xerial snappy ---------------------------------------------------------------------------
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_COMPAT_VERSION = 1
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
XERIAL_CHUNK_LEN = struct.Struct(">i")  # length of the raw snappy block that follows
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE (bytes of input per chunk)

# What the libraries raise on undecodable input (gzip.BadGzipFile is an OSError, lz4 raises
# RuntimeError, cramjam and ISA-L have their own errors that derive from Exception only).
_DECODE_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
    # isal's stubs declare its error class as an instance (`error: Exception`); it is a class.
    cast("type[Exception]", isal_zlib.error),
)

# --- LZ4 frame -------------------------------------------------------------------------------
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FLG_OFFSET = len(LZ4_FRAME_MAGIC)
LZ4_BD_OFFSET = LZ4_FLG_OFFSET + 1
LZ4_FLG_VERSION = 0x40  # FLG bits 7-6: version 01
LZ4_FLG_BLOCK_INDEPENDENT = 0x20
LZ4_FLG_BLOCK_CHECKSUM = 0x10
LZ4_FLG_CONTENT_SIZE = 0x08
LZ4_FLG_CONTENT_CHECKSUM = 0x04
LZ4_FLG_DICT_ID = 0x01
LZ4_CONTENT_SIZE_BYTES = 8
LZ4_DICT_ID_BYTES = 4
LZ4_CHECKSUM_BYTES = 4
LZ4_MIN_HEADER = LZ4_BD_OFFSET + 2  # magic, FLG, BD, HC
# Block headers: uint32 LE size, high bit set for a block stored uncompressed; 0 ends the frame.
LZ4_BLOCK_HEADER_BYTES = 4
LZ4_BLOCK_UNCOMPRESSED = 0x80000000
LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # BD bits 6-4 -> block maximum size


# A batch whose output may exceed this is inflated in pieces of this size: glibc's mmap threshold
# as a worker sets it (runtime/worker.py HEAP_MMAP_BYTES), so each piece is its own mapping,
# handed back to the kernel when freed, not kept in the heap.
PIECE_BYTES = 32 << 20
DEFLATE_MAX_RATIO = 1032
LZ4_MAX_RATIO = 256
ZSTD_BLOCK_MAX = 128 << 10
ZSTD_MAGIC = 0xFD2FB528
ZSTD_SKIPPABLE_MAGIC = 0x184D2A50  # low 4 bits free
GZIP_WBITS = 31  # zlib's window bits for a gzip member
GZIP_FEED_BYTES = 8 << 10


class _OverLimit(Exception):
    """Raised inside a codec when its output passes the limit (typed by `inflate`)."""


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def _check_codec(codec: int, magic: int, path: str, position: int | None) -> None:
    if codec not in CODEC_NAMES:
        raise UnsupportedCodecError(f"unknown compression codec id {codec}", path=path, position=position)
    if codec == CODEC_ZSTD and magic < MAGIC_V2:
        raise UnsupportedCodecError(
            f"zstd is not allowed in magic v{magic} messages", path=path, position=position
        )


def compress(codec: int, data: bytes, magic: int = MAGIC_V2) -> bytes:
    """Compress `data` the way Kafka's producer/cleaner frames `codec` (default level)."""
    _check_codec(codec, magic, "<memory>", None)
    if codec == CODEC_NONE:
        return bytes(data)
    # The libraries read any contiguous buffer (the rebuild hands slices of its output): no copy.
    if codec == CODEC_ZSTD:
        return zstd_compressor().compress(data)
    if codec == CODEC_GZIP:
        return igzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    return _lz4_compress(data, broken_header_checksum=magic == MAGIC_V0)


def decompress(
    codec: int,
    data: bytes | memoryview,
    magic: int = MAGIC_V2,
    *,
    path: str = "<memory>",
    position: int | None = None,
    limit: int = MAX_INFLATED_BATCH_BYTES,
) -> bytes:
    """Inverse of `compress`; also reads the variants real producers write (see module doc).
    One buffer: `inflate`'s pieces joined."""
    pieces = inflate(codec, data, magic, path=path, position=position, limit=limit)
    return bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)


def inflate(
    codec: int,
    data: bytes | memoryview,
    magic: int = MAGIC_V2,
    *,
    path: str = "<memory>",
    position: int | None = None,
    limit: int = MAX_INFLATED_BATCH_BYTES,
) -> Pieces:
    """The decompressed bytes of `data` as a list of buffers (one, unless the output may pass
    PIECE_BYTES), at most `limit` bytes in all: `InflateLimitError` beyond it.

    `path`/`position` label the errors: `CorruptRecordError` for undecodable input.
    """
    _check_codec(codec, magic, path, position)
    if codec == CODEC_NONE:
        if len(data) > limit:
            raise _limit_error(codec, data, limit, path, position)
        return [bytes(data)]
    try:
        if codec == CODEC_GZIP:
            return _gzip_inflate(data, limit)
        if codec == CODEC_SNAPPY:
            return _xerial_inflate(memoryview(data), limit)
        if codec == CODEC_LZ4:
            return _lz4_inflate(bytes(data), magic, limit)
        return _zstd_inflate(data, limit)
    except _OverLimit:
        raise _limit_error(codec, data, limit, path, position) from None
    except CorruptRecordError as err:
        raise CorruptRecordError(err.message, path=path, position=position) from err
    except _DECODE_ERRORS as err:
        raise CorruptRecordError(
            f"cannot decompress {codec_name(codec)} data: {err}", path=path, position=position
        ) from err


def inflate_bound(codec: int, data: bytes | memoryview, magic: int = MAGIC_V2) -> int | None:
    """The most bytes `data` can inflate to, as its framing declares it: the block headers of
    zstd frames or of one lz4 frame, the chunk lengths of a xerial snappy stream. None for gzip,
    uncompressed data, legacy lz4 frames, or framing that does not end exactly at the end of
    `data` (then only `inflate` reads it). Nothing is decompressed; the bound is not capped."""
    view = memoryview(data)
    try:
        if codec == CODEC_ZSTD and magic == MAGIC_V2:
            return _zstd_bound(view)
        if codec == CODEC_LZ4 and magic != MAGIC_V0:
            return _lz4_bound(view)
        if codec == CODEC_SNAPPY and _is_xerial_header(view, 0):
            return sum(cramjam.snappy.decompress_raw_len(c) for c in _xerial_chunks(view))
    except (CorruptRecordError, *_DECODE_ERRORS):
        return None
    return None


def inflate_into(
    codec: int,
    data: bytes | memoryview,
    out: Buffer,
    magic: int = MAGIC_V2,
    *,
    path: str = "<memory>",
    position: int | None = None,
    limit: int = MAX_INFLATED_BATCH_BYTES,
) -> int:
    """Decompress `data` into the writable buffer `out`, of at least `inflate_bound(codec, data)`
    bytes (which the caller has checked against `limit`); returns the bytes written. What the
    decoders refuse, output past `out` included, is decoded again by `inflate` (bounded by
    `limit`) for its typed error; output that still does not fit `out` is corrupt."""
    out = memoryview(out).cast("B")
    try:
        if codec == CODEC_ZSTD:
            return cramjam.zstd.decompress_into(data, out)
        if codec == CODEC_LZ4 and magic != MAGIC_V0 and _lz4_independent(data):
            return cramjam.lz4.decompress_into(data, out)
        if codec == CODEC_SNAPPY:
            chunks = _xerial_chunks(memoryview(data))
            return _snappy_into(((c, cramjam.snappy.decompress_raw_len(c)) for c in chunks), out)
    except (_OverLimit, CorruptRecordError, *_DECODE_ERRORS):
        pass
    pieces = inflate(codec, data, magic, path=path, position=position, limit=limit)
    total = sum(len(p) for p in pieces)
    if total > len(out):
        raise CorruptRecordError(
            f"{codec_name(codec)} records inflate past the {len(out)} bytes their framing declares",
            path=path,
            position=position,
        )
    at = 0
    for piece in pieces:
        out[at : at + len(piece)] = piece
        at += len(piece)
    return total


def _limit_error(
    codec: int, data: bytes | memoryview, limit: int, path: str, position: int | None
) -> InflateLimitError:
    return InflateLimitError(
        f"{codec_name(codec)} records of {len(data)} compressed bytes inflate to more "
        f"than {limit} bytes (--max-inflated-batch-bytes)",
        codec=codec_name(codec),
        limit=limit,
        path=path,
        position=position,
    )


def _read_pieces(read: Callable[[int], bytes], limit: int) -> Pieces:
    """Pieces from `read(n)` (at most n bytes, b"" at the end) until the end, at most `limit` bytes."""
    pieces: Pieces = []
    total = 0
    while True:
        piece = read(min(PIECE_BYTES, limit + 1 - total))
        if not piece:
            return pieces
        total += len(piece)
        if total > limit:
            raise _OverLimit
        pieces.append(piece)


# --- gzip ------------------------------------------------------------------------------------


def _gzip_inflate(data: bytes | memoryview, limit: int) -> Pieces:
    if len(data) * DEFLATE_MAX_RATIO <= min(PIECE_BYTES, limit):
        return [igzip.decompress(data)]
    # Members one after the other, zero padding between them skipped (GZIPInputStream,
    # gzip.decompress). Input goes to a member GZIP_FEED_BYTES at a time: what a member leaves
    # unused is copied when it ends, which must not cost a copy of the rest per member.
    view, pos, total = memoryview(data), 0, 0
    pieces: Pieces = []
    while pos < len(view):
        window = bytes(view[pos : pos + GZIP_FEED_BYTES])
        padding = len(window) - len(window.lstrip(b"\0"))
        pos += padding
        if padding:
            continue
        member = isal_zlib.decompressobj(wbits=GZIP_WBITS)
        tail: bytes | memoryview = b""
        while not member.eof:
            if not tail:
                tail = view[pos : pos + GZIP_FEED_BYTES]
                pos += len(tail)
            fed = tail
            piece = member.decompress(fed, min(PIECE_BYTES, limit + 1 - total))
            tail = member.unconsumed_tail
            if not piece and not fed and not member.eof:
                raise CorruptRecordError("gzip data ends before its end-of-stream marker")
            total += len(piece)
            if total > limit:
                raise _OverLimit
            if piece:
                pieces.append(piece)
        pos -= len(member.unused_data)  # handed to the member, past its end
    return pieces


# --- snappy ----------------------------------------------------------------------------------


def _xerial_compress(data: Buffer) -> bytes:
    parts: list[Buffer] = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPAT_VERSION)]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts += (XERIAL_CHUNK_LEN.pack(len(block)), block)
    return b"".join(parts)


def _is_xerial_header(view: memoryview, pos: int) -> bool:
    return (
        len(view) - pos >= XERIAL_HEADER.size and bytes(view[pos : pos + len(XERIAL_MAGIC)]) == XERIAL_MAGIC
    )


def _xerial_inflate(view: memoryview, limit: int) -> Pieces:
    if not _is_xerial_header(view, 0):
        # SnappyInputStream falls back to one raw block when the magic is missing.
        if cramjam.snappy.decompress_raw_len(view) > limit:
            raise _OverLimit
        return [bytes(cramjam.snappy.decompress_raw(view))]
    chunks = _xerial_chunks(view)
    sizes = [cramjam.snappy.decompress_raw_len(c) for c in chunks]  # each block's declared length
    if sum(sizes) > limit:
        raise _OverLimit
    # Runs of chunks into pieces of about PIECE_BYTES, each chunk decompressed in place.
    pieces: Pieces = []
    run: list[tuple[memoryview, int]] = []
    run_bytes = 0
    for chunk, size in zip(chunks, sizes, strict=True):
        if run and run_bytes + size > PIECE_BYTES:
            pieces.append(_snappy_run(run, run_bytes))
            run, run_bytes = [], 0
        run.append((chunk, size))
        run_bytes += size
    if run or not pieces:
        pieces.append(_snappy_run(run, run_bytes))
    return pieces


def _xerial_chunks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a (possibly concatenated) xerial stream."""
    chunks = []
    pos = 0
    while pos < len(view):
        if _is_xerial_header(view, pos):  # start of a (possibly concatenated) stream
            pos += XERIAL_HEADER.size
            continue
        if len(view) - pos < XERIAL_CHUNK_LEN.size:
            raise CorruptRecordError(f"xerial snappy chunk header truncated at {pos}")
        (length,) = XERIAL_CHUNK_LEN.unpack_from(view, pos)
        pos += XERIAL_CHUNK_LEN.size
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy chunk of {length} bytes at {pos} runs past the end")
        chunks.append(view[pos : pos + length])
        pos += length
    return chunks


def _snappy_run(run: list[tuple[memoryview, int]], total: int) -> bytearray:
    out = bytearray(total)
    _snappy_into(run, memoryview(out))
    return out


def _snappy_into(chunks: Iterable[tuple[memoryview, int]], out: memoryview) -> int:
    """Raw snappy blocks, each with the length it declares, decompressed one after the other into
    `out`: `_OverLimit` for a block past its end, a block that holds fewer bytes than it declares
    is corrupt. Returns the bytes written."""
    at = 0
    for chunk, size in chunks:
        if at + size > len(out):
            raise _OverLimit
        if cramjam.snappy.decompress_raw_into(chunk, out[at : at + size]) != size:
            raise CorruptRecordError(f"a snappy block declares {size} bytes and holds fewer")
        at += size
    return at


# --- lz4 -------------------------------------------------------------------------------------

_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = (2654435761, 2246822519, 3266489917, 668265263, 374761393)
_U32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _U32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes: all an LZ4 frame descriptor checksum ever covers.

    (Plain Python keeps the `xxhash` package out of the dependencies; longer inputs would need
    the four-lane main loop, which nothing here uses.)
    """
    n = len(data)
    if n >= 16:
        raise ValueError("xxh32 here only handles inputs shorter than 16 bytes")
    h = (seed + _XXH_P5 + n) & _U32
    pos = 0
    while pos + 4 <= n:
        h = (h + int.from_bytes(data[pos : pos + 4], "little") * _XXH_P3) & _U32
        h = (_rotl32(h, 17) * _XXH_P4) & _U32
        pos += 4
    while pos < n:
        h = (h + data[pos] * _XXH_P5) & _U32
        h = (_rotl32(h, 11) * _XXH_P1) & _U32
        pos += 1
    h ^= h >> 15
    h = (h * _XXH_P2) & _U32
    h ^= h >> 13
    h = (h * _XXH_P3) & _U32
    return h ^ (h >> 16)


def _lz4_header_checksum_index(frame: bytes) -> int:
    """Index of the HC byte: after magic, FLG, BD and the optional 8-byte content size."""
    flg = frame[LZ4_FLG_OFFSET]
    return LZ4_BD_OFFSET + 1 + (LZ4_CONTENT_SIZE_BYTES if flg & LZ4_FLG_CONTENT_SIZE else 0)


def _lz4_compress(data: bytes, broken_header_checksum: bool) -> bytes:
    frame = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,  # Kafka's reader rejects dependent blocks
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if not broken_header_checksum:
        return frame
    hc_index = _lz4_header_checksum_index(frame)
    broken = (xxh32(frame[:hc_index]) >> 8) & 0xFF  # over magic+FLG+BD, as Kafka 0.8/0.9 did
    return frame[:hc_index] + bytes([broken]) + frame[hc_index + 1 :]


def _lz4_inflate(frame: bytes, magic: int, limit: int) -> Pieces:
    if len(frame) < LZ4_MIN_HEADER or frame[: len(LZ4_FRAME_MAGIC)] != LZ4_FRAME_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic")
    if not _lz4_independent(frame):
        raise CorruptRecordError("Dependent block stream is unsupported (lz4 FLG without block independence)")
    if magic == MAGIC_V0:
        hc_index = _lz4_header_checksum_index(frame)
        correct = (xxh32(frame[LZ4_FLG_OFFSET:hc_index]) >> 8) & 0xFF
        frame = frame[:hc_index] + bytes([correct]) + frame[hc_index + 1 :]
    bound = _lz4_bound(memoryview(frame))
    if (len(frame) * LZ4_MAX_RATIO if bound is None else bound) <= min(PIECE_BYTES, limit):
        return [lz4.frame.decompress(frame)]
    reader = lz4.frame.LZ4FrameDecompressor()
    first = [frame]

    def read(n: int) -> bytes:
        if reader.eof:
            return b""
        piece = reader.decompress(first.pop() if first else b"", n)
        if not piece and not reader.eof:
            raise CorruptRecordError("lz4 frame is truncated")
        return piece

    return _read_pieces(read, limit)


def _lz4_independent(frame: bytes | memoryview) -> bool:
    """Whether the frame's blocks are independent (liblz4 reads dependent ones, Kafka does not)."""
    return len(frame) > LZ4_FLG_OFFSET and bool(frame[LZ4_FLG_OFFSET] & LZ4_FLG_BLOCK_INDEPENDENT)


def _lz4_bound(view: memoryview) -> int | None:
    """The most bytes one LZ4 frame can regenerate, from its block headers (a stored block says
    its size, a compressed one regenerates at most the BD block maximum size); None unless the
    frame's blocks are independent, and it is well-formed to its end mark and ends exactly at
    the end of `view`."""
    n = len(view)
    if n < LZ4_MIN_HEADER or bytes(view[: len(LZ4_FRAME_MAGIC)]) != LZ4_FRAME_MAGIC:
        return None
    flg, block_max = view[LZ4_FLG_OFFSET], LZ4_BLOCK_MAX.get((view[LZ4_BD_OFFSET] >> 4) & 7)
    if flg & 0xC0 != LZ4_FLG_VERSION or block_max is None or not _lz4_independent(view):
        return None
    pos = LZ4_MIN_HEADER + (LZ4_CONTENT_SIZE_BYTES if flg & LZ4_FLG_CONTENT_SIZE else 0)
    pos += LZ4_DICT_ID_BYTES if flg & LZ4_FLG_DICT_ID else 0
    block_trailer = LZ4_CHECKSUM_BYTES if flg & LZ4_FLG_BLOCK_CHECKSUM else 0
    total = 0
    while True:
        if n - pos < LZ4_BLOCK_HEADER_BYTES:
            return None
        word = int.from_bytes(view[pos : pos + LZ4_BLOCK_HEADER_BYTES], "little")
        pos += LZ4_BLOCK_HEADER_BYTES
        if not word:
            break
        size = word & ~LZ4_BLOCK_UNCOMPRESSED
        total += size if word & LZ4_BLOCK_UNCOMPRESSED else block_max
        pos += size + block_trailer
    pos += LZ4_CHECKSUM_BYTES if flg & LZ4_FLG_CONTENT_CHECKSUM else 0
    return total if pos == n else None


# --- zstd ------------------------------------------------------------------------------------

_LOCAL = threading.local()  # zstd contexts are costly to create and must not be shared by threads


def zstd_compressor() -> zstandard.ZstdCompressor:
    """This thread's compressor at Kafka's default level."""
    z = getattr(_LOCAL, "compressor", None)
    if z is None:
        z = _LOCAL.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return z


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_LOCAL, "decompressor", None)
    if d is None:
        d = _LOCAL.decompressor = zstandard.ZstdDecompressor()
    return d


def _zstd_inflate(data: bytes | memoryview, limit: int) -> Pieces:
    view = memoryview(data)
    bound = _zstd_bound(view)
    if bound is not None and bound <= min(PIECE_BYTES, limit):
        return [_zstd_decompress(data)]
    if bound is None:
        # Framing this walk does not follow (to be refused by the decoder, which says why):
        # counted within the limit, then decoded whole.
        reader = _zstd_decompressor().stream_reader(view, read_across_frames=True)
        _read_pieces(lambda n: reader.read(n), limit)
        return [_zstd_decompress(data)]
    # Every frame's blocks are all there (the walk reached the end exactly): streamed in pieces.
    reader = _zstd_decompressor().stream_reader(view, read_across_frames=True)
    return _read_pieces(reader.read, limit)


def _zstd_bound(view: memoryview) -> int | None:
    """The most bytes the zstd frames of `view` can regenerate, from their block headers (RFC
    8878: raw and RLE blocks say their size, a compressed block regenerates at most
    ZSTD_BLOCK_MAX); None unless the frames end exactly at the end of `view`."""
    n, pos, total = len(view), 0, 0
    while pos < n:
        if n - pos < 5:
            return None
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & ~0xF == ZSTD_SKIPPABLE_MAGIC:
            if n - pos < 8:
                return None
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            continue
        if magic != ZSTD_MAGIC:
            return None
        fhd = view[pos + 4]
        single = (fhd >> 5) & 1
        pos += 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3] + (single, 2, 4, 8)[fhd >> 6]
        while True:
            if n - pos < 3:
                return None
            header = int.from_bytes(view[pos : pos + 3], "little")
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:  # reserved
                return None
            total += ZSTD_BLOCK_MAX if kind == 2 else size
            pos += 3 + (1 if kind == 1 else size)
            if header & 1:
                break
        pos += 4 * ((fhd >> 2) & 1)  # content checksum
    return total if pos == n else None


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    # Frame by frame, because frames written by zstd-jni's stream do not record the content size
    # (so no one-shot decompress), and a payload may hold several frames, as ZstdInputStream reads.
    rest = bytes(data)
    if not rest:
        return b""
    parts = []
    while rest:
        frame = _zstd_decompressor().decompressobj()
        parts.append(frame.decompress(rest))
        if not frame.eof:
            raise CorruptRecordError("zstd frame is truncated")
        rest = frame.unused_data
    return parts[0] if len(parts) == 1 else b"".join(parts)
