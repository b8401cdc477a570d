"""What a partition task hands back (compaction/steps/results.py) and the rule both kinds of task
apply before they write (compaction/steps/pipeline.py `open_transaction`): the typed records, the
Spark rows they become, and the re-plan bound."""

from __future__ import annotations

import dataclasses
import mmap
import time
from types import SimpleNamespace

import numpy as np
import pytest
from groupkit import generate, outcomes, specs_for

from compaction.errors import IndexCorruptError
from compaction.settings import COMPRESSION_CODECS
from compaction.spark.stages import FUSED_FIELDS, typed
from compaction.steps.pipeline import TaskClock, compact_whole, open_transaction
from compaction.steps.ranges import ProducerState
from compaction.steps.results import STATS_ROW, GroupResult, TaskTimings, as_rows, failed, unstable


@pytest.mark.parametrize("record", [GroupResult, TaskTimings])
def test_every_field_of_a_task_record_is_in_the_stage_schema(record):
    """`typed` keeps only the schema's names: a field it lacks would vanish on its way to the driver."""
    names = {n for n, _ in FUSED_FIELDS}
    assert {f.name for f in dataclasses.fields(record)} <= names


def test_rows_carry_the_known_fields_only_and_timings_as_their_own_row():
    done = GroupResult(3, bytes_read=10, bytes_written=4, seconds=0.5, unchanged=0)
    rows = as_rows(
        [done, *failed([4, 5], "damaged"), *unstable([6], 120), TaskTimings(1.0, 0.25, 2.0, 0.5, 300)]
    )
    assert rows == [
        {"group_id": 3, "bytes_read": 10, "bytes_written": 4, "seconds": 0.5, "unchanged": 0},
        {"group_id": 4, "error": "damaged"},
        {"group_id": 5, "error": "damaged"},
        {"group_id": 6, "first_unstable": 120},
        {
            "group_id": STATS_ROW,
            "scan_seconds": 1.0,
            "map_seconds": 0.25,
            "cpu_seconds": 2.0,
            "system_seconds": 0.5,
            "minor_faults": 300,
        },
    ]
    assert typed(rows[0])["records_read"] is None and typed(rows[0])["bytes_read"] == 10


@pytest.mark.parametrize(
    "first_unstable, bound, replan",
    [
        (None, 100, None),  # no open transaction
        (99, 100, 99),  # below the planned bound: plan again with it
        (100, 100, None),  # at the bound: the round stops there anyway
        (150, 100, None),
        (0, 0, None),  # an erasing-only partition's bound (0) holds nothing below it
    ],
)
def test_an_open_transaction_below_the_bound_sends_the_partition_back_to_planning(
    first_unstable, bound, replan
):
    state = ProducerState(first_unstable, {})
    specs = [SimpleNamespace(upper_bound=bound), SimpleNamespace(upper_bound=bound + 1000)]
    assert open_transaction(state, specs) == replan


def test_a_whole_partition_tasks_timings_lie_within_its_run(tmp_path):
    """The scan and map seconds a task reports are parts of its wall time, its CPU seconds at most
    what this process spent meanwhile (summed by the driver into the run's report)."""
    part = generate(tmp_path / "logs", "--records", "3000", "--keys", "300", "--segment-bytes", "30000")
    wall, cpu = time.monotonic(), time.process_time()
    results, timings = compact_whole(specs_for(part, 2), 0)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert len(results) == 2 and not any(r.error or r.first_unstable for r in results)
    assert 0 <= timings.scan_seconds and 0 <= timings.map_seconds
    assert timings.scan_seconds + timings.map_seconds <= wall
    assert 0 < timings.cpu_seconds <= cpu


@pytest.mark.parametrize("reuse_bytes, rescanned", [(0, "all"), (1 << 30, "none")])
def test_a_rewrite_counts_the_segments_it_scanned_again(tmp_path, reuse_bytes, rescanned):
    """Without a scan cache the rewrite scans every segment again; with room for them all, none."""
    part = generate(tmp_path / "logs", "--records", "3000", "--keys", "300", "--segment-bytes", "30000")
    specs = specs_for(part, 2)
    results, _ = compact_whole(specs, reuse_bytes)
    counts = [r.segments_rescanned for r in results]
    assert counts == ([len(s.segments) for s in specs] if rescanned == "all" else [0] * len(specs))
    assert sum(len(s.segments) for s in specs) >= 4


@pytest.mark.parametrize(
    "codec, kept_codecs, rescanned",
    [
        ("lz4", COMPRESSION_CODECS, "none"),
        ("lz4", ("gzip", "zstd"), "all"),
        ("zstd", ("gzip", "zstd"), "none"),
        ("zstd", (), "all"),
        ("none", (), "none"),  # uncompressed scans are kept by their columns, whatever the codecs
        ("mixed", ("gzip",), None),
    ],
)
def test_the_scans_of_codecs_left_out_are_scanned_again_to_the_same_bytes(
    tmp_path, codec, kept_codecs, rescanned
):
    """A scan cache with room for every segment keeps the scans of compressed segments only for
    `scan_reuse_codecs`: the others are decompressed again by the rewrite, which writes the same
    files either way."""
    part = generate(
        tmp_path / "logs", "--records", "3000", "--keys", "300", "--segment-bytes", "30000", "--codec", codec
    )
    specs = specs_for(part, 2)

    def run(codecs):
        results, _ = compact_whole(specs, 1 << 30, frozenset(codecs))
        cleaned = {f.name: f.read_bytes() for f in sorted(part.glob("*.cleaned"))}
        return results, cleaned

    results, cleaned = run(kept_codecs)
    every, cleaned_every = run(COMPRESSION_CODECS)
    assert outcomes(as_rows(results)) == outcomes(as_rows(every)) and cleaned == cleaned_every
    assert cleaned and not any(r.error for r in results)
    assert [r.segments_rescanned for r in every] == [0] * len(specs)
    counts = [r.segments_rescanned for r in results]
    if rescanned is not None:
        assert counts == ([len(s.segments) for s in specs] if rescanned == "all" else [0] * len(specs))


def test_a_whole_partition_task_runs_the_index_checks_and_writes_nothing_past_a_damaged_index(tmp_path):
    """The driver leaves the index checks to the task that scans the partition: an entry past its
    segment's end fails the task, naming the file and the entry's position, before anything is
    written."""
    part = generate(tmp_path / "logs", "--records", "3000", "--keys", "300", "--segment-bytes", "30000")
    index = sorted(part.glob("*.index"))[1]
    n = index.stat().st_size // 8
    assert n >= 2
    with open(index, "r+b") as fh:
        fh.seek((n - 1) * 8 + 4)
        fh.write((99_999_999).to_bytes(4, "big"))
    with pytest.raises(IndexCorruptError, match="past the end") as err:
        compact_whole(specs_for(part, 2), 0)
    assert (err.value.path, err.value.position) == (str(index), (n - 1) * 8)
    assert not list(part.glob("*.cleaned"))


def test_a_task_clock_counts_the_first_touches_of_fresh_memory_as_faults_and_system_time():
    """128 MiB of fresh anonymous memory, one byte written per 4 KiB page (no huge pages): each
    first touch is a minor fault, the kernel's time (allocating, zeroing) counted as system CPU."""
    clock = TaskClock()
    area = mmap.mmap(-1, 128 << 20)
    area.madvise(mmap.MADV_NOHUGEPAGE)
    pages = np.frombuffer(area, np.uint8)
    pages[::4096] = 1
    t = clock.timings(0.0, 0.0)
    del pages
    area.close()
    assert t.minor_faults >= (128 << 20) // 4096
    assert 0 < t.system_seconds <= t.cpu_seconds
