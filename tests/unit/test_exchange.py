"""The exchange through which the ranges stage's tasks meet (compaction/runtime/exchange.py): a
file of blocks reads back as written, a file appears whole or not at all, a damaged one is a typed
error naming it, and a wait for a peer ends with its status, or with `PeerGone` once the peer is
gone or silent (never at once while it beats, never long after). On a local directory and on an
object store (pyarrow's in-memory filesystem: no rename, no fsync)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pyarrow.fs as pafs
import pytest

from compaction.errors import ExchangeError
from compaction.runtime import exchange as xm
from compaction.runtime.exchange import INDEX_LENGTH, PREFIX, Block, Exchange, PeerGone, from_block, to_block
from compaction.runtime.storage import Storage


@pytest.fixture(params=["local", "object store"])
def ex(request, tmp_path) -> Exchange:
    if request.param == "local":
        return Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.6)
    fs = pafs._MockFileSystem()
    fs.create_dir("bucket/exchange")
    return Exchange(Storage(fs), "bucket/exchange", peer_wait=0.6)


def _blocks() -> list[Block]:
    return [
        Block(r, kind, bucket, seq, to_block(ids=np.arange(seq, seq + n, dtype=np.int64)).to_pybytes())
        for r, kind, bucket, seq, n in [
            (0, 1, 3, 0, 5),
            (0, 2, -1, 7, 0),
            (4, 1, 0, 2, 1000),
            (2**31 - 1, 9, 7, 2**40, 3),
        ]
    ]


def test_blocks_read_back_as_written_whole_or_selected(ex):
    blocks = _blocks()
    size = ex.write_blocks("scan-0", blocks)
    assert size == ex.storage.info(ex.path("scan-0")).size
    assert list(ex.read_blocks("scan-0")) == blocks
    index = ex.read_index("scan-0")
    assert index["kind"].tolist() == [1, 2, 1, 9] and index["length"].tolist() == [
        len(b.data) for b in blocks
    ]
    ones = list(ex.read_blocks("scan-0", lambda ix: ix["kind"] == 1, index))
    assert ones == [blocks[0], blocks[2]]
    assert from_block(ones[1].data).column("ids").to_pylist() == list(range(2, 1002))
    assert list(ex.read_blocks("scan-0", lambda ix: ix["kind"] == 5)) == []
    ex.write_blocks("empty", [])
    assert list(ex.read_blocks("empty")) == []


@pytest.mark.parametrize("cut", [1, 8, 40])
def test_a_damaged_or_missing_file_is_an_error_naming_it(ex, cut):
    ex.write_blocks("scan-1", _blocks())
    path = ex.path("scan-1")
    data = ex.storage.read_bytes(path)
    with ex.storage.fs.open_output_stream(path) as out:
        out.write(data[: len(data) - cut])  # its trailer, or part of its index, gone
    with pytest.raises(ExchangeError, match="scan-1"):
        list(ex.read_blocks("scan-1"))
    with pytest.raises(ExchangeError, match="scan-2"):
        ex.read_index("scan-2")


@pytest.mark.parametrize("trailer", [INDEX_LENGTH.pack(2**64 - 1), INDEX_LENGTH.pack(2**40)])
def test_a_trailer_that_names_more_bytes_than_the_file_holds_is_an_error_naming_it(ex, trailer):
    """A damaged trailer is the file's error (its partition fails), not a read of exabytes."""
    ex.write_blocks("scan-1", _blocks())
    path = ex.path("scan-1")
    data = ex.storage.read_bytes(path)
    with ex.storage.fs.open_output_stream(path) as out:
        out.write(data[: -INDEX_LENGTH.size] + trailer)
    at = len(data) - INDEX_LENGTH.size
    with pytest.raises(ExchangeError, match=f"scan-1: the trailer at byte {at} gives an index of"):
        list(ex.read_blocks("scan-1"))


def test_a_file_whose_writer_fails_does_not_appear(ex):
    def failing():
        yield _blocks()[0]
        raise OSError("the task died while writing")

    with pytest.raises(OSError, match="died"):
        ex.write_blocks("found-0", failing())
    assert not ex.storage.exists(ex.path("found-0"))
    ex.write_blocks("found-0", _blocks())  # a retry writes it whole
    assert list(ex.read_blocks("found-0")) == _blocks()


def test_an_upload_the_object_store_refuses_fails_with_the_stores_error(monkeypatch):
    """A store that refuses the upload itself leaves no object: the writer's cleanup finds nothing
    to delete, and the error the task reports is the store's, not a missing file's."""
    fs = pafs._MockFileSystem()
    fs.create_dir("bucket/exchange")
    ex = Exchange(Storage(fs), "bucket/exchange")

    class RefusesUploads:
        def open_output_stream(self, *args, **kwargs):
            raise OSError("503 slow down")

        def __getattr__(self, name):
            return getattr(fs, name)

    monkeypatch.setattr(ex.storage, "_fs", RefusesUploads())
    with pytest.raises(OSError, match="503 slow down"):
        ex.write_blocks("found-0", _blocks())
    monkeypatch.undo()
    assert not ex.storage.exists(ex.path("found-0"))


def test_statuses_are_gathered_once_every_task_posted(ex):
    assert not ex.posted("scan", 1)
    ex.post("scan", 0, {"error": None, "n": 1})
    ex.post("scan", 1, {"error": "damaged", "n": 2})
    assert ex.posted("scan", 1) and not ex.posted("merge", 1)
    assert ex.gather("scan", 2) == [{"error": None, "n": 1}, {"error": "damaged", "n": 2}]


def test_a_wait_outlasts_a_slow_peer_whose_heart_beats(tmp_path, monkeypatch):
    """The peer posts after several times `peer_wait`: its heartbeat keeps the waiter waiting.
    (Local only: the in-memory store gives every file the same mtime, so no beat shows there.)"""
    ex = Exchange(Storage.local(), str(tmp_path / "exchange"), peer_wait=0.6)
    monkeypatch.setattr(xm, "HEARTBEAT_SECONDS", 0.1)

    def peer():
        with ex.heartbeat(1):
            time.sleep(4 * ex.peer_wait)
            ex.post("merge", 1, {"error": None})

    thread = threading.Thread(target=peer)
    thread.start()
    try:
        assert ex.status("merge", 1) == {"error": None}
    finally:
        thread.join()


def test_a_wait_for_a_peer_that_never_beats_ends_after_peer_wait(ex):
    started = time.monotonic()
    with pytest.raises(PeerGone) as gone:
        ex.status("merge", 3)
    waited = time.monotonic() - started
    assert (gone.value.task, gone.value.phase) == (3, "merge")
    assert ex.peer_wait <= waited < ex.peer_wait + 2.5  # a local peer is looked at 4 times a beat


def test_a_peer_that_stopped_early_is_not_waited_for(ex):
    """A task that meets `PeerGone` says so (`gone-<task>`): its own waiters give up at once,
    however long they would wait for a silent one."""
    ex.peer_wait = 30  # a waiter that missed the word fails below after this, rather than hanging
    with pytest.raises(PeerGone):
        with ex.heartbeat(2):
            raise PeerGone(0, "scan")
    assert ex.storage.exists(ex.path("gone-2"))
    started = time.monotonic()
    with pytest.raises(PeerGone):
        ex.status("piece-5", 2)
    assert time.monotonic() - started < 5


def test_without_waiting_a_posted_status_is_read_and_a_missing_one_is_gone(ex):
    ex.post("scan", 0, {"error": None})
    quick = ex.no_wait()
    assert quick.peer_wait == 0 and quick.root == ex.root
    assert quick.status("scan", 0) == {"error": None}
    started = time.monotonic()
    with pytest.raises(PeerGone):
        quick.status("scan", 1)
    assert time.monotonic() - started < 1


def test_a_heartbeat_beats_while_its_block_runs_and_stops_after(ex, monkeypatch):
    monkeypatch.setattr(xm, "HEARTBEAT_SECONDS", 0.05)
    with ex.heartbeat(0):
        time.sleep(0.3)
        beats = int(ex.storage.read_bytes(ex.path("alive-0")))
        assert beats >= 2
    time.sleep(0.3)
    assert int(ex.storage.read_bytes(ex.path("alive-0"))) <= beats + 2
    assert not ex.storage.exists(ex.path("gone-0"))


def test_a_heartbeat_that_cannot_be_written_once_beats_on(ex, monkeypatch):
    """A store that refuses one write of the heartbeat file (a throttled request) costs one beat,
    not the heart: the waiters would otherwise give up on a task that is running."""
    monkeypatch.setattr(xm, "HEARTBEAT_SECONDS", 0.05)
    real, refused = Exchange._create, []

    def refuses_the_first_beat(self, name):
        if name == "alive-0" and not refused:
            refused.append(name)
            raise OSError("503 slow down")
        return real(self, name)

    monkeypatch.setattr(Exchange, "_create", refuses_the_first_beat)
    with ex.heartbeat(0):
        deadline = time.monotonic() + 10
        while not ex.storage.exists(ex.path("alive-0")) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert refused and int(ex.storage.read_bytes(ex.path("alive-0"))) >= 1


def test_remove_leaves_nothing(ex):
    ex.write_blocks("scan-0", _blocks())
    ex.post("scan", 0, {})
    ex.remove()
    assert not ex.storage.exists(ex.path("scan-0")) and not ex.storage.exists(ex.path("done-scan-0.json"))
    if ex.storage.is_local:
        assert not os.path.exists(ex.root)
    ex.remove()  # again (the driver's cleanup after a stage that removed it): nothing to do, no error


@pytest.mark.parametrize("refused", ["delete", "listing"])
def test_a_removal_the_object_store_refuses_is_left_undone_without_an_error(monkeypatch, refused):
    """The driver removes the directory after the stage has done its work: a store that refuses a
    delete or the listing (a throttled request) leaves the files there, and the job goes on."""
    fs = pafs._MockFileSystem()
    fs.create_dir("bucket/exchange")
    ex = Exchange(Storage(fs), "bucket/exchange")
    ex.write_blocks("scan-0", _blocks())

    def refuse(*args, **kwargs):
        raise OSError("503 slow down")

    class RefusesListings:
        get_file_info = staticmethod(refuse)

        def __getattr__(self, name):
            return getattr(fs, name)

    if refused == "delete":
        monkeypatch.setattr(Storage, "delete", refuse)
    else:
        monkeypatch.setattr(ex.storage, "_fs", RefusesListings())
    ex.remove()
    monkeypatch.undo()
    assert ex.storage.exists(ex.path("scan-0"))


def test_the_directory_is_the_configured_one_the_drivers_temp_or_beside_the_log_dir(tmp_path):
    configured = Exchange.create(str(tmp_path / "conf"), local_master=True, log_dir=str(tmp_path / "logs"))
    assert os.path.dirname(configured.root) == str(tmp_path / "conf")
    assert os.path.basename(configured.root).startswith(PREFIX) and os.path.isdir(configured.root)
    temp = Exchange.create(None, local_master=True, log_dir=str(tmp_path / "logs"), peer_wait=7)
    assert os.path.basename(temp.root).startswith(PREFIX) and temp.peer_wait == 7
    with temp:
        assert os.path.isdir(temp.root)
    assert not os.path.exists(temp.root)
    beside = Exchange.create(None, local_master=False, log_dir=str(tmp_path / "logs"))
    assert os.path.dirname(beside.root) == str(tmp_path) and os.path.isdir(beside.root)
    assert configured.root != beside.root
