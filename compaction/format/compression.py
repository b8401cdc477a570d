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
"""

from __future__ import annotations

import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard
from isal import igzip, isal_zlib

from compaction.errors import CorruptRecordError, UnsupportedCodecError
from compaction.format.layout import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, MAGIC_V0, MAGIC_V2

CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4",
               CODEC_ZSTD: "zstd"}

# Kafka writes zlib level 6 (Deflater.DEFAULT_COMPRESSION); ISA-L's levels are 0-3, and its 3
# matches zlib 6's ratio on record data at ~5x the speed. Any level decodes the same.
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
_DECODE_ERRORS = (OSError, EOFError, ValueError, RuntimeError, zlib.error, zstandard.ZstdError,
                  cramjam.DecompressionError, isal_zlib.error)

# --- LZ4 frame -------------------------------------------------------------------------------
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FLG_OFFSET = len(LZ4_FRAME_MAGIC)
LZ4_BD_OFFSET = LZ4_FLG_OFFSET + 1
LZ4_FLG_BLOCK_INDEPENDENT = 0x20
LZ4_FLG_CONTENT_SIZE = 0x08
LZ4_CONTENT_SIZE_BYTES = 8
LZ4_MIN_HEADER = LZ4_BD_OFFSET + 2  # magic, FLG, BD, HC


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def _check_codec(codec: int, magic: int, path: str, position: int | None) -> None:
    if codec not in CODEC_NAMES:
        raise UnsupportedCodecError(f"unknown compression codec id {codec}", path=path, position=position)
    if codec == CODEC_ZSTD and magic < MAGIC_V2:
        raise UnsupportedCodecError(f"zstd is not allowed in magic v{magic} messages",
                                    path=path, position=position)


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


def decompress(codec: int, data: bytes | memoryview, magic: int = MAGIC_V2, *,
               path: str = "<memory>", position: int | None = None) -> bytes:
    """Inverse of `compress`; also reads the variants real producers write (see module doc).

    `path`/`position` only label the `CorruptRecordError` raised for undecodable input.
    """
    _check_codec(codec, magic, path, position)
    if codec == CODEC_NONE:
        return bytes(data)
    try:
        if codec == CODEC_GZIP:
            return igzip.decompress(data)
        if codec == CODEC_SNAPPY:
            return _xerial_decompress(memoryview(data))
        if codec == CODEC_LZ4:
            return _lz4_decompress(bytes(data), magic)
        return _zstd_decompress(data)
    except CorruptRecordError as err:
        raise CorruptRecordError(err.message, path=path, position=position) from err
    except _DECODE_ERRORS as err:
        raise CorruptRecordError(f"cannot decompress {codec_name(codec)} data: {err}",
                                 path=path, position=position) from err


# --- snappy ----------------------------------------------------------------------------------

def _xerial_compress(data) -> bytes:
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPAT_VERSION)]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        parts += (XERIAL_CHUNK_LEN.pack(len(block)), block)
    return b"".join(parts)


def _is_xerial_header(view: memoryview, pos: int) -> bool:
    return len(view) - pos >= XERIAL_HEADER.size and bytes(view[pos:pos + len(XERIAL_MAGIC)]) == XERIAL_MAGIC


def _xerial_decompress(view: memoryview) -> bytes:
    if not _is_xerial_header(view, 0):
        # SnappyInputStream falls back to one raw block when the magic is missing.
        return bytes(cramjam.snappy.decompress_raw(view))
    blocks = []  # cramjam reads the chunks in place; one join copies them out
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
        blocks.append(cramjam.snappy.decompress_raw(view[pos : pos + length]))
        pos += length
    return b"".join(blocks)


# --- lz4 -------------------------------------------------------------------------------------

_XXH_P1, _XXH_P2, _XXH_P3, _XXH_P4, _XXH_P5 = (2654435761, 2246822519, 3266489917, 668265263,
                                               374761393)
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
        h = (h + int.from_bytes(data[pos:pos + 4], "little") * _XXH_P3) & _U32
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
    return frame[:hc_index] + bytes([broken]) + frame[hc_index + 1:]


def _lz4_decompress(frame: bytes, magic: int) -> bytes:
    if len(frame) < LZ4_MIN_HEADER or frame[:len(LZ4_FRAME_MAGIC)] != LZ4_FRAME_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic")
    if not frame[LZ4_FLG_OFFSET] & LZ4_FLG_BLOCK_INDEPENDENT:
        raise CorruptRecordError("Dependent block stream is unsupported (lz4 FLG without block independence)")
    if magic == MAGIC_V0:
        hc_index = _lz4_header_checksum_index(frame)
        correct = (xxh32(frame[LZ4_FLG_OFFSET:hc_index]) >> 8) & 0xFF
        frame = frame[:hc_index] + bytes([correct]) + frame[hc_index + 1:]
    return lz4.frame.decompress(frame)


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


def _zstd_decompress(data) -> bytes:
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
