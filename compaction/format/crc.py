"""Checksums of the three record formats (docs/kafka-rules.md#crc, #legacy-messages).

| format | algorithm                            | range covered                     | Kafka source                   |
|--------|--------------------------------------|-----------------------------------|--------------------------------|
| v2     | CRC-32C (Castagnoli, 0x1EDC6F41)     | batch bytes [21, end): attributes | `DefaultRecordBatch`, `Crc32C` |
| v0/v1  | CRC-32 (IEEE, `java.util.zip.CRC32`) | message bytes from `magic` to end | `LegacyRecord`                 |

Both are stored as unsigned 32-bit big-endian integers. The `crc32c` package is the C
implementation (SSE4.2/ARMv8 when available); `zlib.crc32` is IEEE CRC-32. The same checksums
from inside compiled kernels: `kernels/crc.py`.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C of `data` as an unsigned int (what a v2 batch stores at byte 17)."""
    return _crc32c.crc32c(data)


def crc32(data: bytes | bytearray | memoryview) -> int:
    """IEEE CRC-32 of `data` as an unsigned int (what a v0/v1 message stores at byte 12)."""
    return zlib.crc32(data) & 0xFFFFFFFF
