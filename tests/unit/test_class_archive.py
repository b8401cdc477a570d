"""The driver JVM's class-data archive (compaction/cli/class_archive.py): which options a run gets,
when a partial archive becomes the one mapped, and that an archive Java wrote is one it maps."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from compaction.cli import class_archive as ca
from compaction.cli import launcher

KEY = "k" * 24
HEADER = ca.MAGIC.pack(ca.DYNAMIC_MAGIC)


@pytest.fixture(autouse=True)
def _any_free_space(monkeypatch):
    """The options must not depend on how full the test machine's disk is; the threshold itself
    is tested below."""
    monkeypatch.setattr(ca, "MIN_FREE_BYTES", 0)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _write(path, data: bytes) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
    return str(path)


def test_a_run_writes_the_archive_when_none_is_ready_then_later_runs_map_it(tmp_path):
    pid = _dead_pid()
    assert ca.java_options(str(tmp_path), KEY, pid) == [
        f"-XX:ArchiveClassesAtExit={tmp_path}/{KEY}.{pid}.partial",
        *ca.COMMON,
    ]
    _write(tmp_path / f"{KEY}.{pid}.partial", HEADER + b"\0" * 4096)  # its JVM wrote it and exited
    assert ca.java_options(str(tmp_path), KEY, 1) == [
        f"-XX:SharedArchiveFile={tmp_path}/{KEY}.jsa",
        *ca.COMMON,
    ]
    assert os.listdir(tmp_path) == [f"{KEY}.jsa"]


@pytest.mark.parametrize(
    "content, promoted",
    [
        (HEADER + b"regions" * 100, True),
        (b"\0" * 4096 + b"regions", False),  # killed before Java wrote the header: never mapped
        (b"", False),  # killed before any region
        (HEADER[:2], False),
        (ca.MAGIC.pack(0xF00BABA2) + b"\0" * 64, False),  # a static archive's magic, not a dynamic one's
    ],
)
def test_a_gone_writers_archive_is_promoted_only_with_its_header(tmp_path, content, promoted):
    path = _write(tmp_path / f"{KEY}.{_dead_pid()}.partial", content)
    ca.promote(str(tmp_path), KEY)
    assert not os.path.exists(path)
    assert os.path.exists(tmp_path / f"{KEY}.jsa") is promoted


def _process_with_cmdline(template: str) -> subprocess.Popen:
    """A live process whose command line carries `template % its pid` (it execs itself so)."""
    code = (
        "import os, sys; os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', "
        "sys.argv[1] % os.getpid()])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, template])
    want = (template % proc.pid).encode()
    for _ in range(500):
        with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
            if want in fh.read():
                return proc
        time.sleep(0.01)
    raise AssertionError("the process did not exec")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
@pytest.mark.parametrize("writing, promoted", [(True, False), (False, True)])
def test_an_archive_is_left_alone_while_its_writer_runs(tmp_path, writing, promoted):
    template = f"{tmp_path}/{KEY}.%d.partial"
    # Not writing: the archive's pid is now another process's (a pid reused), without the option.
    proc = _process_with_cmdline(f"-XX:ArchiveClassesAtExit={template}" if writing else "other-%d")
    try:
        path = _write(template % proc.pid, HEADER + b"\0" * 64)
        ca.promote(str(tmp_path), KEY)
        assert os.path.exists(tmp_path / f"{KEY}.jsa") is promoted
        assert os.path.exists(path) is not promoted
    finally:
        proc.kill()
        proc.wait()


def test_archives_no_run_used_for_a_month_are_deleted(tmp_path):
    old = 1_700_000_000
    now = old + ca.STALE_SECONDS + 1
    other, dead = "o" * 24, _dead_pid()
    files = {
        f"{other}.jsa": (old, False),  # a replaced install's: deleted
        f"{other}.{dead}.partial": (old, False),  # its abandoned write: deleted
        f"{other}x.jsa": (now - 60, True),  # used a minute ago: kept
        f"{KEY}.jsa": (old, True),  # the key of this run: it is about to be used
    }
    for name, (mtime, _) in files.items():
        _write(tmp_path / name, HEADER)
        os.utime(tmp_path / name, (mtime, mtime))
    ca.prune(str(tmp_path), KEY, now=now)
    assert sorted(os.listdir(tmp_path)) == sorted(n for n, (_, kept) in files.items() if kept)
    ca.java_options(str(tmp_path), KEY, 1)  # maps it, and makes it fresh
    assert time.time() - os.stat(tmp_path / f"{KEY}.jsa").st_mtime < 60


def test_no_archive_where_the_dir_cannot_take_one(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert ca.java_options(str(blocked / "jvm"), KEY, 1) == []
    monkeypatch.setattr(ca, "MIN_FREE_BYTES", 1 << 62)
    assert ca.java_options(str(tmp_path), KEY, 1) == []


def test_the_key_changes_with_sparks_jars_and_the_java_install(tmp_path):
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    _write(spark / "jars" / "spark-core.jar", b"1")
    java = shutil.which("java") or sys.executable
    first = ca.archive_key(java, str(spark))
    assert ca.archive_key(java, str(spark)) == first
    _write(spark / "jars" / "spark-core.jar", b"12")
    second = ca.archive_key(java, str(spark))
    assert second != first
    assert ca.archive_key(sys.executable, str(spark)) != second


def test_the_launcher_adds_the_archive_to_the_client_drivers_java_options(tmp_path):
    env = {**os.environ, "KAFKA_COMPACTION_CDS_DIR": str(tmp_path / "jvm")}
    java = shutil.which("java") or sys.executable

    def driver_options(argv, env=env):
        cmd, _ = launcher.submit_command(
            launcher.split_argv([*argv, "--log-dir", "d"]), env, java=java, pid=7
        )
        return [c for c in cmd if c.startswith("spark.driver.extraJavaOptions=")]

    (opts,) = driver_options([])
    assert f"-XX:ArchiveClassesAtExit={tmp_path}/jvm/" in opts and opts.endswith(
        f".7.partial {' '.join(ca.COMMON)}"
    )
    assert "-Dlog4j2.configurationFile=" in opts
    # The driver runs on the cluster: this host's archive is not its.
    assert "ArchiveClasses" not in " ".join(
        driver_options(["--master", "spark://h:7077", "--deploy-mode", "cluster"])
    )
    # The user's own driver options are the driver's, as for log4j.
    assert driver_options(["--conf", "spark.driver.extraJavaOptions=-Dx=1"]) == [
        "spark.driver.extraJavaOptions=-Dx=1"
    ]
    for off in ("off", "0", "", str(tmp_path / "with space")):
        assert "ArchiveClasses" not in driver_options([], {**env, "KAFKA_COMPACTION_CDS_DIR": off})[0]


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM")
def test_an_archive_java_wrote_is_promoted_and_mapped_and_a_damaged_one_refused(tmp_path):
    """The real JVM: the header check recognises what Java writes, the promoted file maps
    (`-Xshare:on` fails the JVM when it cannot), and one with a damaged region is refused by its
    checksums: under `-Xshare:on` the JVM stops, under the default it runs without it."""
    cache = tmp_path / "jvm"
    write = ca.java_options(str(cache), KEY, _dead_pid())
    subprocess.run(["java", *write, "-version"], check=True, capture_output=True)
    ca.promote(str(cache), KEY)
    mapping = ca.java_options(str(cache), KEY, 1)
    assert mapping[0] == f"-XX:SharedArchiveFile={cache}/{KEY}.jsa"
    done = subprocess.run(["java", "-Xshare:on", *mapping, "-version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    archive = cache / f"{KEY}.jsa"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte of a region, past the header
    os.chmod(archive, 0o644)
    archive.write_bytes(bytes(data))
    assert subprocess.run(["java", "-Xshare:on", *mapping, "-version"], capture_output=True).returncode != 0
    assert subprocess.run(["java", *mapping, "-version"], capture_output=True).returncode == 0
