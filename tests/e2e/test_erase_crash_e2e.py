"""An erasing pass SIGKILLed mid-way, then run again, ends exactly where an uninterrupted pass
does: one run killed in the commit of its second partition (whole-partition tasks), one killed
after the second range wrote its `.cleaned` files (ranges), then ONE run over both dirs and an
untouched copy; the three dirs must then hold the same bytes, with no listed key left."""

from __future__ import annotations

import os
import shutil

import pytest
from e2ekit import decode_partition, tree_hashes
from faultkit import assert_loads, parts, run_driver_only, start_submit
from test_crash_e2e import NOW, RANGES, _crash_run

from compaction.tools.generator import generate_log_dir

pytestmark = [pytest.mark.slow, pytest.mark.spark]

LISTED = [b"key-000003", b"key-000011", b"key-000017", b"key-000029"]


def _hashes(log_dir: str) -> dict[str, str]:
    tree = tree_hashes(log_dir)
    tree.pop(".compaction.lock", None)
    return tree


def test_sigkill_mid_erase_then_rerun(tmp_path):
    root = str(tmp_path)
    pristine = os.path.join(root, "pristine")
    generate_log_dir(
        pristine,
        topics=(("t", 3),),
        records=500,
        keys=30,
        codec="mixed",
        segment_bytes=5000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.3,
        idempotent=0.2,
        seed=41,
    )
    before = {p: decode_partition(os.path.join(pristine, p)) for p in parts(pristine)}
    keys = os.path.join(root, "keys.txt")
    with open(keys, "w") as fh:
        fh.write("".join(k.decode() + "\n" for k in LISTED))
    args = ("--erase-keys", keys, "--erase-only")
    dirs = []
    for tag, step, extra in (("whole", "renamed:2", ()), ("ranges", "cleaned:2", RANGES)):
        log_dir = os.path.join(root, tag)
        shutil.copytree(pristine, log_dir)
        run = _crash_run(log_dir, {"COMPACTION_CRASH_AT": step}, args=(*args, *extra))
        assert run["marked"] and run["killed"], (tag, run)
        proc = run_driver_only(log_dir, "--recover-only", "--now-ms", str(NOW))
        assert proc.returncode == 0, proc.stderr
        for p in parts(log_dir):  # each partition holds its input or its erased records, never a mix
            now = decode_partition(os.path.join(log_dir, p))
            assert now in (before[p], [r for r in before[p] if r.key not in LISTED]), (tag, p)
        dirs.append(log_dir)
    reference = os.path.join(root, "reference")
    shutil.copytree(pristine, reference)
    proc = start_submit([*dirs, reference], os.path.join(root, "final.json"), "--now-ms", str(NOW), *args)
    _, stderr = proc.communicate(timeout=1200)
    assert proc.returncode == 0, stderr[-4000:]
    for p in parts(reference):
        part_dir = os.path.join(reference, p)
        assert decode_partition(part_dir) == [r for r in before[p] if r.key not in LISTED], p
        assert_loads(part_dir)
    for log_dir in dirs:
        assert _hashes(log_dir) == _hashes(reference), log_dir
