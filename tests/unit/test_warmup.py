"""compaction/spark/warmup.py: the Python-worker warm-up is a real (tiny) round and leaves nothing behind."""

from __future__ import annotations

import glob
import os
import tempfile

from compaction.spark.warmup import warm


def test_warm_compacts_a_tiny_partition_and_cleans_up():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "kafka-compaction-warmup-*")))
    assert warm() > 0
    assert warm() > 0  # again in the same process: nothing left over from the first
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "kafka-compaction-warmup-*")))
    assert after == before


def test_warm_up_never_reaches_a_test_crash_point(monkeypatch, tmp_path):
    """COMPACTION_CRASH_AT=rewrite must stop a real partition's rewrite, not the warm-up's."""
    mark = tmp_path / "mark"
    monkeypatch.setenv("COMPACTION_CRASH_AT", "rewrite")
    monkeypatch.setenv("COMPACTION_CRASH_MARK", str(mark))
    assert warm() > 0  # a crash point reached here would SIGSTOP this very process
    assert not mark.exists()
    assert os.environ["COMPACTION_CRASH_AT"] == "rewrite"
