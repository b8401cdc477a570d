"""Byte layout of the record formats: every offset, size and mask, declared once.

Plain ints only: the numba kernels read module-level ints as compile-time constants, and the codec
modules (`batch.py`, `legacy.py`, `segment.py`, `index.py`, `txnindex.py`) keep one `struct.Struct`
per header whose field offsets must agree with these (`tests/unit/test_layout.py` checks them on golden bytes).
All integers are big-endian. Offsets are from the start of the log entry.

The drawings of the formats are in the docstrings of the codec modules, each with its part:
log entry framing (the 17 bytes every entry starts with) in `segment.py`, the RecordBatch v2
header and record in `batch.py`, legacy messages (magic v0 and v1) in `legacy.py`, `.index` and
`.timeindex` entries in `index.py`, `.txnindex` entries in `txnindex.py`.

Attributes of a v2 batch (low byte): bits 0-2 codec, bit 3 timestamp type (1 = LogAppendTime),
bit 4 transactional, bit 5 control, bit 6 delete horizon set (baseTimestamp holds it). A v2
record has one byte per field at the least, so `MIN_RECORD_SIZE` = 7.
"""

from __future__ import annotations

# --- magic values and codec ids ---------------------------------------------------------------------
MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
MAX_CODEC = CODEC_ZSTD  # 5..7 are not defined by Kafka
MAX_LEGACY_CODEC = CODEC_LZ4  # zstd is illegal in v0/v1 messages

# --- log entry framing --------------------------------------------------------------------------------
OFFSET_OFFSET = 0
SIZE_OFFSET = 8
LOG_OVERHEAD = 12  # offset int64 + size int32
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17

# --- v2 batch header ------------------------------------------------------------------------------------
BASE_OFFSET_OFFSET = OFFSET_OFFSET
LENGTH_OFFSET = SIZE_OFFSET
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
ATTRIBUTE_FLAGS_OFFSET = 22  # the low byte of the int16 attributes: the only one Kafka reads
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61  # the header; also the size of an empty batch
CRC_COVERED_FROM = ATTRIBUTES_OFFSET  # the CRC skips baseOffset, length, leader epoch, magic, crc

# --- v2 attributes ----------------------------------------------------------------------------------------
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TIMESTAMP_TYPE_SHIFT = 3
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
ATTRIBUTE_FLAGS_MASK = 0xFF  # Kafka reads `(byte) getShort(21)`: only the low byte counts
CREATE_TIME, LOG_APPEND_TIME = 0, 1  # the timestamp type bit's values (TimestampType ids)

# --- v2 record ------------------------------------------------------------------------------------------
MIN_RECORD_SIZE = 7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headersCount
MAX_VARINT_BYTES = 5  # int32 zig-zag varint
MAX_VARLONG_BYTES = 10  # int64 zig-zag varint
INT32_MAX = 2**31 - 1  # Integer.MAX_VALUE: relative offsets and positions in .index are int32
# A broker opens no larger `.log` (FileRecords refuses it) nor index (a Java memory map takes an int
# size); the most of any file this tool reads whole (runtime/storage.py `refuse_longer`).
FILE_MAX_BYTES = INT32_MAX

# --- legacy v0/v1 message ---------------------------------------------------------------------------------
LEGACY_CRC_OFFSET = 12
LEGACY_MAGIC_OFFSET = MAGIC_OFFSET
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18  # v1 only
LEGACY_KEY_LENGTH_OFFSET_V0 = 18
LEGACY_KEY_LENGTH_OFFSET_V1 = 26
LEGACY_LENGTH_SIZE = 4  # keyLength and valueLength are int32
LEGACY_CRC_COVERED_FROM = LEGACY_MAGIC_OFFSET
# Kafka's RECORD_OVERHEAD_V0/V1: a message's size minus its key and value bytes, so also the
# smallest valid `size` of each; Kafka rejects any entry whose size is below the v0 one.
RECORD_OVERHEAD_V0 = 14  # crc + magic + attributes + keyLength + valueLength
RECORD_OVERHEAD_V1 = 22  # ... + timestamp
MIN_ENTRY_SIZE = RECORD_OVERHEAD_V0

# --- index entries ----------------------------------------------------------------------------------------
OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
ABORTED_TXN_SIZE = 34
