"""Zig-zag varints of the v2 record format (docs/kafka-rules.md#varints).

Wire format (Kafka `clients/.../common/utils/ByteUtils.java`: `writeVarint`, `writeVarlong`,
`readVarint`, `readVarlong`; used by `DefaultRecord`):

| step      | meaning                                                                   |
|-----------|---------------------------------------------------------------------------|
| zig-zag   | int32 -> `(v << 1) ^ (v >> 31)`, int64 -> `(v << 1) ^ (v >> 63)`           |
| LEB128    | 7 payload bits per byte, least significant group first, bit 7 = "more"    |
| max bytes | 5 for a varint (int32), 10 for a varlong (int64)                          |

Every varint in a v2 record is zig-zag, lengths included: a length of 10 is the byte `0x14` and a
null key/value (-1) is the byte `0x01`.

Decoders take `(buf, pos)` and return `(value, next_pos)`; they raise `CorruptRecordError` with the
position inside `buf` when the varint runs past the end or is longer than Kafka allows. Callers
that know the file path re-raise with it (see `batch.py`).
"""

from __future__ import annotations

from compaction.errors import CorruptRecordError
from compaction.format.layout import MAX_VARINT_BYTES, MAX_VARLONG_BYTES

CONTINUATION_BIT = 0x80
PAYLOAD_MASK = 0x7F
PAYLOAD_BITS = 7

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT32_MASK = (1 << 32) - 1
_UINT64_MASK = (1 << 64) - 1


def zigzag_encode(value: int, bits: int = 64) -> int:
    """Map a signed value to an unsigned one so that small magnitudes stay short."""
    mask = (1 << bits) - 1
    return ((value << 1) ^ (value >> (bits - 1))) & mask


def zigzag_decode(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def _write_unsigned(raw: int, out: bytearray) -> None:
    while raw > PAYLOAD_MASK:
        out.append((raw & PAYLOAD_MASK) | CONTINUATION_BIT)
        raw >>= PAYLOAD_BITS
    out.append(raw)


def write_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint of an int32 to `out`."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    _write_unsigned(zigzag_encode(value, 32), out)


def write_varlong(value: int, out: bytearray) -> None:
    """Append the zig-zag varlong of an int64 to `out`."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    _write_unsigned(zigzag_encode(value, 64), out)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    out = bytearray()
    write_varlong(value, out)
    return bytes(out)


def _read_unsigned(buf: bytes | memoryview, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    raw = 0
    shift = 0
    start = pos
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError(f"{what} runs past the end of the buffer", position=start)
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"{what} is longer than {max_bytes} bytes", position=start)
        byte = buf[pos]
        pos += 1
        raw |= (byte & PAYLOAD_MASK) << shift
        if not byte & CONTINUATION_BIT:
            return raw, pos
        shift += PAYLOAD_BITS


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint (int32) at `pos`; returns `(value, next_pos)`."""
    raw, pos = _read_unsigned(buf, pos, MAX_VARINT_BYTES, "varint")
    # Java keeps only the low 32 bits of a 5-byte varint; do the same.
    return zigzag_decode(raw & _UINT32_MASK), pos


def read_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varlong (int64) at `pos`; returns `(value, next_pos)`."""
    raw, pos = _read_unsigned(buf, pos, MAX_VARLONG_BYTES, "varlong")
    return zigzag_decode(raw & _UINT64_MASK), pos


def size_of_varint(value: int) -> int:
    """Kafka's `ByteUtils.sizeOfVarint`. Test-only: the kernels size records themselves."""
    return len(encode_varint(value))


def size_of_varlong(value: int) -> int:
    return len(encode_varlong(value))
