"""The headers of rebuilt v2 batches, one at a time (`header_for`, `seal`) or all of a segment's
at once as a numpy array (`headers_for`, `seal_all`): kept fields, delete-horizon bit, new
recordsCount, batchLength and the CRC-32C over the compressed-as-before payload.

`seal_plain` seals a segment's uncompressed rebuilt batches in one compiled call, each header
written into the room the rebuild left before its records, so that a run of them is one
contiguous chunk for the writer, without `seal_all`'s and the writer's Python work per batch
(tens of thousands of batches per GiB of Kafka's workload)."""

from __future__ import annotations

import crc32c as _crc32c
import numpy as np

from compaction.format import batch as fb
from compaction.format import compression, layout
from compaction.format.layout import (
    CRC_COVERED_FROM,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
)
from compaction.kernels import codec_threads
from compaction.kernels.crc import crc32c_at
from compaction.kernels.jit import borrow
from compaction.kernels.jit import njit as _njit
from compaction.kernels.memops import memcpy_at, put_be32


def header_for(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    horizon: int,
) -> fb.BatchHeader:
    """The rebuilt batch's header fields (batch_length and crc filled by `seal`). `attributes` are
    the original ones: codec, timestamp type, transactional and control bits are kept; the
    delete-horizon bit is set when `horizon >= 0` (or was already set)."""
    attrs = attributes & (
        layout.COMPRESSION_CODEC_MASK
        | layout.TIMESTAMP_TYPE_MASK
        | layout.TRANSACTIONAL_MASK
        | layout.CONTROL_MASK
        | layout.DELETE_HORIZON_MASK
    )
    if horizon >= 0:
        attrs |= layout.DELETE_HORIZON_MASK
    return fb.BatchHeader(
        base_offset,
        0,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attrs,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )


# The v2 batch header as a packed big-endian numpy record (same fields and order as
# batch.BATCH_HEADER), so the headers of all rebuilt batches of a segment are filled at once.
HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD
_KEPT_ATTRS = (
    layout.COMPRESSION_CODEC_MASK
    | layout.TIMESTAMP_TYPE_MASK
    | layout.TRANSACTIONAL_MASK
    | layout.CONTROL_MASK
    | layout.DELETE_HORIZON_MASK
)


def headers_for(
    *,
    base_offset,
    partition_leader_epoch,
    attributes,
    last_offset_delta,
    base_timestamp,
    max_timestamp,
    producer_id,
    producer_epoch,
    base_sequence,
    records_count,
    horizon,
) -> np.ndarray:
    """`header_for` over arrays (one element per rebuilt batch): a HEADER_DTYPE array whose
    batch_length and crc `seal_all` fills."""
    h = np.zeros(len(base_offset), HEADER_DTYPE)
    attrs = np.asarray(attributes, np.int64) & _KEPT_ATTRS
    attrs = np.where(np.asarray(horizon) >= 0, attrs | layout.DELETE_HORIZON_MASK, attrs)
    for name, values in (
        ("base_offset", base_offset),
        ("partition_leader_epoch", partition_leader_epoch),
        ("attributes", attrs),
        ("last_offset_delta", last_offset_delta),
        ("base_timestamp", base_timestamp),
        ("max_timestamp", max_timestamp),
        ("producer_id", producer_id),
        ("producer_epoch", producer_epoch),
        ("base_sequence", base_sequence),
        ("records_count", records_count),
    ):
        h[name] = values
    h["magic"] = MAGIC_V2
    return h


def seal_all(headers: np.ndarray, payload, starts, ends, codecs) -> list[list]:
    """`seal` for every header of `headers_for`: [header bytes, payload] per batch, the records of
    batch j being payload[starts[j]:ends[j]], compressed with codecs[j] (on the codec threads)."""
    raw = headers.view(np.uint8).reshape(len(headers), RECORD_BATCH_OVERHEAD)
    view = memoryview(payload)
    starts, ends = np.asarray(starts).tolist(), np.asarray(ends).tolist()
    codecs = np.asarray(codecs).tolist()
    covered = layout.CRC_COVERED_FROM

    def one(j: int) -> list:
        records = view[starts[j] : ends[j]]
        body = compression.compress(codecs[j], records, MAGIC_V2) if codecs[j] else records
        head = raw[j]  # each batch its own row: the threads never write the same bytes
        fb.BATCH_LENGTH_FIELD.pack_into(
            head, layout.LENGTH_OFFSET, RECORD_BATCH_OVERHEAD - layout.LOG_OVERHEAD + len(body)
        )
        crc = _crc32c.crc32c(body, _crc32c.crc32c(head[covered:]))
        fb.CRC_FIELD.pack_into(head, layout.CRC_OFFSET, crc)
        return [head.tobytes(), body]

    return codec_threads.map_batches(one, [e - s for s, e in zip(starts, ends, strict=True)])


def seal_plain(headers: np.ndarray, out: np.ndarray, starts, ends) -> None:
    """`seal_all` for uncompressed batches whose records are out[starts[j]:ends[j]], each with
    RECORD_BATCH_OVERHEAD free bytes before it (`rebuild_records(..., room=...)`): the headers
    are written there with their batch length and CRC-32C, so batch j is the contiguous bytes
    out[starts[j] - RECORD_BATCH_OVERHEAD:ends[j]], the same bytes as `seal_all`'s pair."""
    raw = np.ascontiguousarray(headers).view(np.uint8).reshape(-1)
    _seal_plain(out, raw, np.asarray(starts, np.int64), np.asarray(ends, np.int64))


@_njit
def _seal_plain(out, raw, starts, ends):
    out, raw = borrow(out), borrow(raw)
    for j in range(len(starts)):
        h = starts[j] - RECORD_BATCH_OVERHEAD
        memcpy_at(out, h, raw, j * RECORD_BATCH_OVERHEAD, RECORD_BATCH_OVERHEAD)
        put_be32(out, h + LENGTH_OFFSET, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + ends[j] - starts[j])
        put_be32(out, h + CRC_OFFSET, crc32c_at(out, h + CRC_COVERED_FROM, ends[j] - h - CRC_COVERED_FROM))


def seal(header: fb.BatchHeader, records, codec: int) -> list:
    """[header bytes, payload] of the batch: payload compressed with `codec` (default level),
    batch_length and the CRC-32C over [21, end) filled in. The payload is not copied when
    uncompressed (a memoryview into the kernel's output)."""
    if codec:
        payload = compression.compress(codec, records, MAGIC_V2)
    else:
        payload = memoryview(records)
    header.batch_length = RECORD_BATCH_OVERHEAD - layout.LOG_OVERHEAD + len(payload)
    header.crc = 0
    head = bytearray(header.pack())
    header.crc = _crc32c.crc32c(payload, _crc32c.crc32c(memoryview(head)[layout.CRC_COVERED_FROM :]))
    fb.CRC_FIELD.pack_into(head, layout.CRC_OFFSET, header.crc)
    return [bytes(head), payload]
