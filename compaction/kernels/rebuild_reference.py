"""Plain-Python twin of `rebuild.rebuild_records` (same signature, same results), built on
`format.batch`: what `build_batch` does with the kept records, to check the kernel against."""

from __future__ import annotations

import numpy as np

from compaction.errors import CorruptRecordError
from compaction.format import batch as fb
from compaction.format.batch_build import encode_record
from compaction.format.layout import LOG_APPEND_TIME
from compaction.format.varint import read_varint, read_varlong
from compaction.kernels.rebuild_kernels import ERR_LAYOUT, NEEDS_FALLBACK, SRC_FILE, _u8, rebuild_error
from compaction.kernels.scan_columns import ERR_RECORD_SIZE


def rebuild_records_py(
    file,
    side,
    src,
    start,
    end,
    count,
    keep,
    keep_start,
    base_ts,
    ts_type,
    max_ts,
    horizon,
    expect_key_pos,
    records=None,
    split=None,
    base_offset=None,
    room=0,
):
    """Plain-Python reference of `rebuild_records` (same signature, same results): it walks each
    region record by record, decoding every record into a `format.batch.Record`, and encodes the
    kept ones with `encode_record`, i.e. exactly what `build_batch` does with them. It does not
    read the scan's columns (`records`, `split`, `base_offset`): the kernel, which does, is checked
    against the bytes themselves."""
    file, side = bytes(_u8(file)), bytes(_u8(side))
    n = len(src)
    payload = bytearray()
    out_start, out_end, new_base, new_max, kept_n = (np.zeros(n, dtype=np.int64) for _ in range(5))
    flags = np.zeros(n, dtype=np.int8)
    for i in range(n):
        buf = file if int(src[i]) == SRC_FILE else side
        pos, stop = int(start[i]), int(end[i])
        if pos < 0 or stop > len(buf) or pos > stop:
            raise rebuild_error(ERR_LAYOUT, i, pos)
        view = memoryview(buf)[:stop]
        log_append = int(ts_type[i]) == LOG_APPEND_TIME
        records = []
        for r in range(int(count[i])):
            try:
                record, key_pos, utf8_ok, nxt = _py_record(view, pos, int(base_ts[i]))
            except (CorruptRecordError, ValueError, IndexError) as e:  # a record the reader cannot parse
                raise rebuild_error(ERR_RECORD_SIZE, i, pos) from e
            if r == 0 and int(expect_key_pos[i]) >= 0 and key_pos != int(expect_key_pos[i]):
                raise rebuild_error(ERR_LAYOUT, i, pos)
            if log_append:
                record.timestamp = int(max_ts[i])
            if keep[int(keep_start[i]) + r]:
                records.append(record)
                if not utf8_ok:
                    flags[i] = NEEDS_FALLBACK
            pos = nxt
        if pos != stop:
            raise rebuild_error(ERR_LAYOUT, i, pos)
        h = int(horizon[i])
        base = h if h >= 0 else (records[0].timestamp if records else h)
        payload += bytes(room)
        out_start[i] = len(payload)
        for record in records:
            encode_record(payload, record, record.offset, record.timestamp - base)
        out_end[i] = len(payload)
        new_base[i] = base
        new_max[i] = int(max_ts[i]) if log_append else max([-1, *(r.timestamp for r in records)])
        kept_n[i] = len(records)
    return np.frombuffer(bytes(payload), dtype=np.uint8), out_start, out_end, new_base, new_max, kept_n, flags


def _py_record(view, pos: int, base_ts: int) -> tuple[fb.Record, int, bool, int]:
    """(Record with offset = offsetDelta, key position, header keys valid UTF-8, next position)."""
    length, p = read_varint(view, pos)
    body_end = p + length
    if length < 0 or body_end > len(view):
        raise CorruptRecordError("record runs past the region")
    body = view[:body_end]
    ts_delta, p = read_varlong(body, p + 1)
    off_delta, p = read_varint(body, p)
    key_len, p = read_varint(body, p)
    key_pos = p
    key, p = fb._read_nullable(body, p, key_len, "key")
    value_len, p = read_varint(body, p)
    value, p = fb._read_nullable(body, p, value_len, "value")
    count, p = read_varint(body, p)
    headers, utf8_ok = [], True
    for _ in range(count):
        hk_len, p = read_varint(body, p)
        name, p = fb._read_nullable(body, p, hk_len, "header key")
        hv_len, p = read_varint(body, p)
        hvalue, p = fb._read_nullable(body, p, hv_len, "header value")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            text, utf8_ok = name.decode("utf-8", errors="replace"), False
        headers.append((text, hvalue))
    if p != body_end:
        raise CorruptRecordError("record fields do not end at its length")
    return fb.Record(off_delta, base_ts + ts_delta, key, value, tuple(headers)), key_pos, utf8_ok, p
