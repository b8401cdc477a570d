"""The log-dir generator as the tests run it, its flags written as one line:
`generate(log_dir, "--topics t:1 --records 800 --seed 5")` in this process, `run_generate(...)` as a
user runs it (`python -m compaction generate`, a child process), `generate_argv(...)` for a test that
runs the command its own way (another executable, environment or timeout)."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_M_COMPACTION = (sys.executable, "-m", "compaction")


def generate_argv(log_dir, flags: str, *more: str, command=PYTHON_M_COMPACTION) -> list[str]:
    """`COMMAND generate LOG_DIR FLAGS... MORE...`: `flags` split on white space (no value has any),
    `more` kept whole."""
    return [*command, "generate", str(log_dir), *flags.split(), *more]


def generate(log_dir, flags: str, *more: str) -> None:
    """`kafka-compaction generate` through the CLI's entry point in this process."""
    from compaction.__main__ import main

    assert main(generate_argv(log_dir, flags, *more, command=())) == 0


def run_generate(log_dir, flags: str, *more: str) -> None:
    """`python -m compaction generate` in a child process from the repo root, its output dropped."""
    subprocess.run(generate_argv(log_dir, flags, *more), check=True, cwd=REPO, stdout=subprocess.DEVNULL)
