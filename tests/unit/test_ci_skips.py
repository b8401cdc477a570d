"""Under CI=true a skip fails the test unless tests/conftest.py lists it as benign."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import benign_skip

HERE = os.path.abspath(__file__)


def test_probe_skips_when_asked():
    """Run by the test below in a pytest of its own: skips for want of something (an environment
    skip)."""
    if os.environ.get("COMPACTION_SKIP_PROBE"):
        pytest.skip("the probe's tool is not installed")


def _probe(ci: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": ci, "COMPACTION_SKIP_PROBE": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{HERE}::test_probe_skips_when_asked",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(HERE))),
        timeout=120,
    )


def test_an_environment_skip_fails_under_ci_and_only_there():
    ci = _probe("true")
    assert ci.returncode == 1, ci.stdout
    assert "skipped under CI=true: the probe's tool is not installed" in ci.stdout
    assert "1 failed" in ci.stdout
    # Without CI=true the same skip is a skip (pytest's own behaviour, which the hook leaves alone):
    # the probe itself passes in this run, where COMPACTION_SKIP_PROBE is not set.


@pytest.mark.parametrize(
    ("nodeid", "reason", "benign"),
    [
        (
            "tests/unit/test_compression.py::test_x[zstd-0]",
            "zstd is illegal for magic < 2 (tested below)",
            True,
        ),
        ("tests/unit/test_compression.py::test_x[zstd-0]", "no zstd library", False),
        ("tests/e2e/test_ship_e2e.py::test_a", "zstd is illegal for magic < 2", False),  # another file
        (
            "tests/e2e/test_cluster_faults.py::test_y[a-b]",
            "a sample of the phase x target matrix runs (CI time)",
            True,
        ),
        ("tests/e2e/test_kafka4_e2e.py::test_z", "Kafka 4.1 broker tests skipped: no jars", False),
    ],
)
def test_benign_skips_are_named_by_test_and_reason(nodeid, reason, benign):
    assert benign_skip(nodeid, reason) is benign
