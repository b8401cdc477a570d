"""Every .log written by a real broker decodes completely with valid CRCs, and kafka-python
counts the same records (fixtures are read-only: we only read them)."""

from collections import Counter
from pathlib import Path

import kafka_python_shims
import pytest
from e2ekit import SHARED_FIXTURES
from kafka.record.memory_records import MemoryRecords

from compaction.format.segment import SegmentReader

kafka_python_shims.install()
ROOT = Path(SHARED_FIXTURES)
LOGS = sorted(ROOT.rglob("*.log"))
PUBLIC = [
    "Bheem6005+kafka",
    "DanielMorales9+kafkafun",
    "marioBarbozaA+AIBulb",
    "mscaldas2012+kafka-connect-spooldir",
]

pytestmark = pytest.mark.skipif(not LOGS, reason=f"no fixtures under {ROOT}")


def _decode(path: Path):
    data = path.read_bytes()
    reader = SegmentReader(data, str(path), verify_crc=True)
    batches = list(reader)
    return data, reader, batches


def _kafka_python_count(data: bytes) -> int:
    records = MemoryRecords(data)
    count = 0
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        count += sum(1 for _ in batch)
    return count


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_log_decodes_completely(path):
    data, reader, batches = _decode(path)
    assert reader.trailing_bytes == 0 and reader.stop_position == len(data)
    assert all(b.crc_valid() for b in batches)
    records = [r for b in batches for r in b.records()]
    assert len(records) == _kafka_python_count(data)
    for b in batches:  # offsets inside each batch lie within its header's range
        offs = [r.offset for r in b.records()]
        assert all(b.header.base_offset <= o <= b.header.last_offset for o in offs)
        assert offs == sorted(offs)


def _summary(folder: str):
    magics, codecs, records = Counter(), Counter(), 0
    for path in LOGS:
        if path.relative_to(ROOT).parts[0] == folder:
            for b in _decode(path)[2]:
                magics[b.magic] += 1
                codecs[b.header.codec] += 1
                records += len(b.records())
    return magics, codecs, records


def test_public_folders_hold_the_documented_record_count():
    # PROVENANCE.md: "All 13,616 records in the four public folders decode with valid CRCs".
    assert sum(_summary(folder)[2] for folder in PUBLIC) == 13_616


def test_kafka_0_9_dir_is_v0_with_compressed_wrappers():
    magics, codecs, records = _summary("kafka-0.9.0.1")
    assert set(magics) == {0} and records > 0
    assert {1, 2, 3} <= set(codecs)  # gzip, snappy and lz4 (broken v0 header checksum) wrappers


def test_java_client_lz4_batches_decode():
    magics, codecs, _ = _summary("mscaldas2012+kafka-connect-spooldir")
    assert magics[2] > 0 and codecs[3] > 0
