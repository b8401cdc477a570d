"""The broker's `<logdir>/.lock` is held whichever call holds it: Java's `FileChannel.tryLock`
(what a broker does), `fcntl.lockf` (POSIX record lock) or `flock` (a wrapper script). A held
lock stops the run (exit 2, nothing written); `--ignore-broker-lock` overrides it with one WARN
line, and says nothing when there was no lock to override."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from e2ekit import tree_hashes
from faultkit import run_driver_only, small_partition

from compaction.runtime.storage import KAFKA_LOCK_FILE, kafka_lock_held

JAVA_LOCK = """
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

public class Lock {
    public static void main(String[] args) throws Exception {
        FileChannel channel = FileChannel.open(Path.of(args[0]), StandardOpenOption.CREATE,
                StandardOpenOption.READ, StandardOpenOption.WRITE);
        FileLock lock = channel.tryLock();  // as LogManager.lockLogDirs (FileLock.tryLock)
        System.out.println(lock != null ? "locked" : "busy");
        System.out.flush();
        System.in.read();
    }
}
"""


def _holder(path: str, kind: str, tmp_path) -> subprocess.Popen:
    if kind == "java":
        if shutil.which("java") is None:
            pytest.skip("no java on the PATH")
        source = tmp_path / "Lock.java"
        source.write_text(JAVA_LOCK)
        cmd = ["java", str(source), path]
    else:
        call = {"flock": "fcntl.flock", "lockf": "fcntl.lockf"}[kind]
        cmd = [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import fcntl, os, sys
            fd = os.open({path!r}, os.O_RDWR | os.O_CREAT)
            {call}(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.read()
        """),
        ]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "locked\n"
    return proc


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "logs"
    small_partition(str(path / "t-0"))
    (path / KAFKA_LOCK_FILE).write_bytes(b"")  # a stopped broker leaves it
    return str(path)


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "--ignore-broker-lock" in line]


@pytest.mark.parametrize("kind", ["java", "lockf", "flock"])
def test_a_held_lock_stops_the_run_and_is_overridden_with_one_warning(log_dir, tmp_path, kind):
    before = tree_hashes(log_dir)
    holder = _holder(os.path.join(log_dir, KAFKA_LOCK_FILE), kind, tmp_path)
    try:
        assert kafka_lock_held(log_dir)
        refused = run_driver_only(log_dir, "--plan-only")
        assert refused.returncode == 2, refused.stderr
        assert (
            f"{log_dir}/{KAFKA_LOCK_FILE} is locked: a Kafka broker is serving this log dir" in refused.stderr
        )
        assert tree_hashes(log_dir) == before
        forced = run_driver_only(log_dir, "--plan-only", "--ignore-broker-lock")
        assert forced.returncode == 0, forced.stderr
        warned = _warnings(forced.stderr)
        assert len(warned) == 1 and "WARN" in warned[0], forced.stderr
        assert f"{log_dir}/{KAFKA_LOCK_FILE} is locked" in warned[0]
    finally:
        holder.kill()
        holder.wait()
    assert not kafka_lock_held(log_dir)


def test_ignore_broker_lock_says_nothing_when_nothing_is_held(log_dir):
    forced = run_driver_only(log_dir, "--plan-only", "--ignore-broker-lock")
    assert forced.returncode == 0, forced.stderr
    assert _warnings(forced.stderr) == []
