"""Bounded fuzz of the segment reader: valid segments (v0/v1/v2, every codec) with bytes
flipped, cut, inserted or deleted, and raw byte soup. `iter_batches` + `records()` and
`scan_segment` may only raise our typed `KafkaFormatError`s (with the path set); anything else
(IndexError, struct.error, a codec library's own exception, a numba crash) fails the test.
test_scan.py covers numba == reference on corrupted logs; this adds the object reader and
mutations that shift bytes."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import KafkaFormatError
from compaction.format import batch as fb
from compaction.format.batch_build import build_batch
from compaction.format.legacy import build_legacy_message_set
from compaction.format.segment import iter_batches
from compaction.kernels.scan import scan_segment

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
PATH = "fuzz.log"


def _segment(codecs: list[int]) -> bytes:
    out, offset = [], 0
    for codec in codecs:
        recs = [fb.Record(offset + i, 1000 + i, f"k{i}".encode(), b"v" * (i * 7)) for i in range(3)]
        if codec >= 5:  # legacy v0/v1, plain or gzip
            magic, legacy_codec = (codec - 5) % 2, (codec - 5) // 2
            out.append(build_legacy_message_set(recs, magic, codec=legacy_codec))
        else:
            out.append(build_batch(recs, codec=codec))
        offset += 3
    return b"".join(out)


segments = st.lists(st.integers(0, 8), min_size=1, max_size=4).map(_segment)
edits = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "delete"]),
        st.floats(0, 1),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=3,
)


def _mutate(data: bytes, ops) -> bytes:
    raw = bytearray(data)
    for op, where, blob in ops:
        at = min(int(where * len(raw)), max(len(raw) - 1, 0))
        if op == "flip" and raw:
            raw[at] ^= blob[0] or 1
        elif op == "cut":
            del raw[at:]
        elif op == "insert":
            raw[at:at] = blob
        elif op == "delete":
            del raw[at : at + len(blob)]
    return bytes(raw)


def _read_everything(data: bytes) -> None:
    for verify in (True, False):
        try:
            for b in iter_batches(data, PATH, verify_crc=verify):
                b.records()
        except KafkaFormatError as err:
            assert err.path == PATH
        try:
            scan_segment(np.frombuffer(data, np.uint8), PATH, verify_crc=verify, allow_trailing=True)
        except KafkaFormatError as err:
            assert err.path == PATH


@FUZZ
@given(segments, edits)
def test_mutated_segments_raise_only_typed_errors(data, ops):
    _read_everything(_mutate(data, ops))


@FUZZ
@given(st.binary(max_size=300))
def test_byte_soup_raises_only_typed_errors(data):
    _read_everything(data)
