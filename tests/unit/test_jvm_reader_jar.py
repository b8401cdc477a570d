"""compaction.jvm.reader_jar(): where the jar is kept, when it is built again, and the error
without javac. (The jar itself is compiled and read in tests/e2e/test_jvm_source_e2e.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compaction import jvm, settings
from compaction.errors import UsageError


@pytest.fixture
def no_javac(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv(settings.JVM_READER_DIR_ENV, str(tmp_path / "cache"))


def test_without_javac_a_usage_error_says_what_to_install(no_javac):
    with pytest.raises(UsageError, match=r"no javac .*install a JDK 17 or later.*kafka_log data source"):
        jvm.reader_jar()


def test_a_jar_of_the_same_sources_is_reused_without_javac(no_javac, tmp_path):
    java_files = sorted(jvm.SOURCES.glob("kafkalog/*.java"))
    built = tmp_path / "cache" / f"kafka-log-jvm-{jvm._key(java_files)}.jar"
    built.parent.mkdir()
    built.write_bytes(b"PK")
    assert jvm.reader_jar() == str(built)


def test_the_key_follows_the_sources_and_the_defaults(monkeypatch):
    java_files = sorted(jvm.SOURCES.glob("kafkalog/*.java"))
    key = jvm._key(java_files)
    assert jvm._key(java_files[:-1]) != key
    monkeypatch.setattr(settings, "JVM_BATCH_ROWS", settings.JVM_BATCH_ROWS + 1)
    assert f"batchRows={settings.JVM_BATCH_ROWS}" in jvm.defaults()
    assert jvm._key(java_files) != key


def test_the_cache_dir_follows_the_environment():
    assert jvm.cache_dir({settings.JVM_READER_DIR_ENV: "/x"}) == "/x"
    assert jvm.cache_dir({"XDG_CACHE_HOME": "/c"}) == os.path.join("/c", "kafka-compaction", "reader")


def test_the_command_prints_the_path_or_the_error(no_javac, tmp_path):
    java_files = sorted(jvm.SOURCES.glob("kafkalog/*.java"))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "compaction.jvm"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "no javac" in proc.stderr, proc
    built = tmp_path / "cache" / f"kafka-log-jvm-{jvm._key(java_files)}.jar"
    built.parent.mkdir()
    built.write_bytes(b"PK")
    proc = subprocess.run([sys.executable, "-m", "compaction.jvm"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == str(built), proc
