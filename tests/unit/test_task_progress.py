"""The executors' progress files (runtime/task_progress.py): what a task counts and writes, what
the driver sums, and where the directory goes."""

from __future__ import annotations

import dataclasses
import json
import os
import time

from s3kit import KEY, REGION, SECRET, client, moto_server

from compaction.runtime import task_progress
from compaction.runtime.storage import Storage
from compaction.runtime.task_progress import ProgressDir, Totals


def test_a_task_writes_what_it_did_since_it_started_and_says_when_it_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(task_progress, "BEAT_SECONDS", 0.05)
    pdir = ProgressDir(str(tmp_path))
    task_progress.count(read=1000)  # an earlier task of the same worker: not this one's
    with task_progress.reporting(str(tmp_path)):
        task_progress.count(read=300, written=20, done=4096)
        deadline = time.monotonic() + 5
        while pdir.totals().read != 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        running = pdir.totals()
    assert running == Totals(read=300, written=20, done=4096, running=1, tasks=1)  # beaten while it runs
    assert pdir.totals() == Totals(read=300, written=20, done=4096, running=0, tasks=1, finished=1)
    (name,) = os.listdir(tmp_path)
    assert json.loads((tmp_path / name).read_text())["finished"] is True


def test_a_task_that_raised_is_neither_running_nor_finished(tmp_path):
    pdir = ProgressDir(str(tmp_path))
    try:
        with task_progress.reporting(str(tmp_path), "4-0"):
            task_progress.count(read=50)
            raise OSError("disk gone")
    except OSError:
        pass
    assert pdir.totals() == Totals(read=50, running=0, tasks=1, finished=0)
    assert json.loads((tmp_path / "4-0.json").read_text())["failed"] is True


def test_the_driver_sums_every_tasks_last_file_and_skips_strangers(tmp_path):
    pdir = ProgressDir(str(tmp_path))
    pdir.write("3-0", {"read": 10, "written": 1, "done": 5, "finished": True})
    pdir.write("3-1", {"read": 7, "written": 0, "done": 2, "finished": False})
    pdir.write("3-1", {"read": 9, "written": 2, "done": 3, "finished": False})  # a later beat replaces it
    (tmp_path / "3-2.json.tmp-1").write_text("{")  # half a write: not a progress file
    assert pdir.totals() == Totals(read=19, written=3, done=8, running=1, tasks=2, finished=1)
    assert ProgressDir(str(tmp_path / "gone")).totals() == Totals()


def test_the_directory_goes_where_the_exchange_directory_would(tmp_path):
    local = ProgressDir.create(None, True, str(tmp_path / "logs"))
    assert os.path.isdir(local.uri) and os.path.basename(local.uri).startswith(task_progress.PREFIX)
    local.remove()
    assert not os.path.exists(local.uri)
    beside = ProgressDir.create(None, False, str(tmp_path / "logs"))  # a cluster: on the log dirs' store
    assert os.path.dirname(beside.uri) == str(tmp_path)
    configured = ProgressDir.create(str(tmp_path / "shared"), False, str(tmp_path / "logs"))
    assert os.path.dirname(configured.uri) == str(tmp_path / "shared")
    assert task_progress._within("s3://b/x?region=r", "p") == "s3://b/x/p?region=r"


def test_a_beat_during_a_rewrites_batch_of_deferred_syncs_is_not_taken_into_it(tmp_path):
    """The rewrite defers its files' fsyncs to its end (durability.py); a progress file renamed
    away by the next beat must not be among them."""
    from compaction.runtime import durability

    pdir = ProgressDir(str(tmp_path))
    with durability.deferred():
        pdir.write("1-0", {"read": 1})
        pdir.write("1-0", {"read": 2})
    assert pdir.totals().read == 2 and os.listdir(tmp_path) == ["1-0.json"]


# --- the beat: every second on a disk, slower on an object store (one PUT a beat) -----------------


def _beats_within(uri: str, seconds: float) -> int:
    """The beat counter of a task's file after `seconds` of work under `reporting(uri)`."""
    with task_progress.reporting(uri, "1-0"):
        time.sleep(seconds)
        storage, root = Storage.for_uri(uri)
        beat = json.loads(storage.read_bytes(f"{root.rstrip('/')}/1-0.json"))["beat"]
    return beat


def test_a_task_beats_slower_on_an_object_store_than_on_a_disk(tmp_path, monkeypatch):
    """The same task, its progress directory on a local disk then on a real S3 server (moto): on
    the disk every BEAT_SECONDS, on the store every OBJECT_STORE_BEAT_SECONDS (as a worker
    configured from its settings has it), each beat one PUT."""
    monkeypatch.setattr(task_progress, "BEAT_SECONDS", 0.02)
    monkeypatch.setattr(task_progress, "OBJECT_STORE_BEAT_SECONDS", task_progress.OBJECT_STORE_BEAT_SECONDS)
    task_progress.configure(0.5)
    (tmp_path / "local").mkdir()
    assert _beats_within(str(tmp_path / "local"), 1.2) >= 5  # a beat every 0.02 s: dozens, bar a stall
    with moto_server(str(tmp_path / "moto.log")) as endpoint:
        client(endpoint).create_bucket(Bucket="progress")
        uri = (
            f"s3://{KEY}:{SECRET}@progress/round?endpoint_override={endpoint.removeprefix('http://')}"
            f"&scheme=http&region={REGION}"
        )
        assert ProgressDir(uri).beat_seconds() == 0.5 and ProgressDir(str(tmp_path)).beat_seconds() == 0.02
        # beats at 0, 0.5 and 1.0 s at the most; never faster, however the machine is loaded
        assert 1 <= _beats_within(uri, 1.2) <= 3


def test_the_object_store_beat_is_a_worker_setting_from_the_spark_conf():
    from compaction.runtime.worker import prepare_worker
    from compaction.settings import PROGRESS_BEAT_OBJECT_STORE_SECONDS, Settings, WorkerSettings

    assert WorkerSettings().progress_beat_object_store_seconds == PROGRESS_BEAT_OBJECT_STORE_SECONDS
    conf = {"spark.kafka.compaction.progressBeatObjectStoreSeconds": "30"}
    worker = Settings.resolve(None, conf, {}).worker
    assert worker.progress_beat_object_store_seconds == 30.0
    try:
        prepare_worker(dataclasses.replace(worker, kernel_cache_dir="off"))
        assert task_progress.OBJECT_STORE_BEAT_SECONDS == 30.0
    finally:
        task_progress.configure(PROGRESS_BEAT_OBJECT_STORE_SECONDS)
