"""What a test needs from the machine: a JDK, a browser, jars from Maven Central.

A test that lacks one skips with the way to get it named, and fails under `CI=true`, where
`.ci/run` installs everything (tests/conftest.py fails any other skip there too; failing here says
what is missing). `maven_copy` fills a cache dir with a pom's runtime jars, the way the broker and
hadoop-aws harnesses fetch theirs. No pytest at import: `.ci/run` runs the harnesses' `install`
with the system Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def need(what: str, reason: str | None, ci_fix: str) -> None:
    """Skip the calling test when `reason` says what is missing (fail it under CI=true)."""
    if reason is None:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} cannot run: {reason}; {ci_fix}")
    pytest.skip(f"{what} skipped: {reason}")


def need_javac() -> None:
    """Skip the calling test when the JDK that compiles the JVM reader is missing (fail it under
    CI=true)."""
    from compaction.errors import UsageError
    from compaction.jvm import javac

    try:
        javac()
    except UsageError as exc:
        need("kafka_log_jvm tests", str(exc), ".ci/run has a JDK")


def maven_copy(pom: str, cache: Path, libs: Path) -> None:
    """`pom`'s runtime dependencies copied by Maven into `libs`, `.complete` (their names) written
    last so that a half-filled cache is never taken for a full one."""
    if not shutil.which("mvn"):
        raise RuntimeError("mvn is not on PATH: Maven fetches the jars from Maven Central")
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "pom.xml").write_text(pom)
    if libs.exists():
        shutil.rmtree(libs)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(cache / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    (libs / ".complete").write_text("\n".join(sorted(p.name for p in libs.glob("*.jar"))) + "\n")
