"""Decompression bombs as a producer could write them: valid v2 batches (CRC-32C right) whose
compressed records inflate to far more than their size, built without ever holding the inflated
bytes (each codec's own framing repeated: zstd RLE blocks, gzip members, lz4 independent blocks,
xerial snappy chunks). The records inflated are zeros: a reader that inflates them all is what
the tests catch, whatever they would decode to."""

from __future__ import annotations

import zlib

import cramjam
import lz4.frame

from compaction.format.batch import BatchHeader
from compaction.format.batch_build import _seal
from compaction.format.compression import XERIAL_CHUNK_LEN, XERIAL_HEADER, XERIAL_MAGIC
from compaction.format.layout import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, MAGIC_V2

MiB = 1 << 20
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_RLE_BLOCK = 128 << 10


def zstd_bomb(n: int) -> bytes:
    """One zstd frame of RLE blocks (4 bytes each for 128 KiB of zeros), no content size."""
    blocks = -(-n // ZSTD_RLE_BLOCK)
    # Frame header: FHD 0 (no content size, no checksum, no dictionary, not single-segment),
    # window descriptor 0x38: 2^(10+7) = 128 KiB.
    out = bytearray(ZSTD_MAGIC + b"\x00\x38")
    for i in range(blocks):
        size = min(ZSTD_RLE_BLOCK, n - i * ZSTD_RLE_BLOCK)
        header = (1 if i == blocks - 1 else 0) | (1 << 1) | (size << 3)
        out += header.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def gzip_bomb(n: int, member: int = 16 * MiB) -> bytes:
    """Concatenated gzip members of zeros (GZIPInputStream reads them all), at zlib's level 9:
    ~1030:1, a 1 MB batch for 1 GiB."""
    full, rest = divmod(n, member)
    return _gzip(member) * full + (_gzip(rest) if rest else b"")


def _gzip(n: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip member
    return z.compress(bytes(n)) + z.flush()


def lz4_bomb(n: int) -> bytes:
    """One LZ4 frame of independent 64 KiB blocks of zeros (the one block repeated)."""
    block = 64 << 10
    frame = lz4.frame.compress(
        bytes(block),
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    header, body, end = frame[:7], frame[7:-4], frame[-4:]  # magic FLG BD HC | one block | end mark
    assert n % block == 0
    return header + body * (n // block) + end


def snappy_bomb(n: int) -> bytes:
    """A xerial stream of 32 KiB chunks of zeros (each ~1.5 KB: snappy's ratio is ~21)."""
    chunk = bytes(cramjam.snappy.compress_raw(bytes(32 << 10)))
    assert n % (32 << 10) == 0
    one = XERIAL_CHUNK_LEN.pack(len(chunk)) + chunk
    return XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1) + one * (n // (32 << 10))


BOMBS = {CODEC_ZSTD: zstd_bomb, CODEC_GZIP: gzip_bomb, CODEC_LZ4: lz4_bomb, CODEC_SNAPPY: snappy_bomb}


def bomb_batch(
    codec: int, inflated: int, base_offset: int = 0, records: int = 1, timestamp: int = 0
) -> bytes:
    """A v2 batch of `records` records whose `codec` payload inflates to `inflated` zero bytes."""
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=0,
        partition_leader_epoch=0,
        magic=MAGIC_V2,
        crc=0,
        attributes=codec,
        last_offset_delta=records - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=records,
    )
    return _seal(header, BOMBS[codec](inflated))
