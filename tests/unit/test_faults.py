"""compaction/runtime/faults.py: a crash point stops the whole process at the arrival it names, even
when several threads reach it together (as the driver's commit threads do), and none gets past it.

Each case runs in a child process (SIGSTOP stops the child, not pytest): THREADS threads meet at a
barrier, call the crash point, and record their passing in a file. The test waits for the mark,
checks that the child is stopped and who had passed, then resumes it: the stopping arrival goes on,
every later arrival must still be held, so exactly `n` threads have passed in the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

THREADS = 8

CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    from compaction.runtime import faults

    out = sys.argv[1]
    barrier = threading.Barrier({threads})
    passed = []

    def arrive(i):
        barrier.wait()
        faults.crash_point("swap")
        passed.append(i)
        open(os.path.join(out, f"passed-{{i}}"), "w").close()
        time.sleep(0.5)  # the others' turn to run past the point, if they could

    threads = [threading.Thread(target=arrive, args=(i,), daemon=True) for i in range({threads})]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with open(os.path.join(out, "result.json"), "w") as fh:
        json.dump({{"passed": passed, "held": sum(t.is_alive() for t in threads)}}, fh)
    os._exit(0)
""").format(threads=THREADS)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("crash_at, n", [("swap", 1), ("swap:3", 3)])
def test_a_crash_point_stops_every_thread_at_the_arrival_it_names(tmp_path, crash_at, n):
    mark = tmp_path / "mark"
    env = {**os.environ, "COMPACTION_CRASH_AT": crash_at, "COMPACTION_CRASH_MARK": str(mark)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env)
    try:
        _wait_for(mark.exists, "no thread reached the crash point")
        _wait_for(lambda: _state(child.pid) == "T", "the process did not stop")
        assert mark.read_text().split() == ["swap", str(child.pid)]
        time.sleep(0.3)
        assert _state(child.pid) == "T"  # still stopped: nothing resumed it
        at_stop = sorted(p.name for p in tmp_path.glob("passed-*"))
        assert len(at_stop) <= n - 1, at_stop  # the arrivals before the n-th only
        os.kill(child.pid, signal.SIGCONT)  # a test never does this: here, to see who was held
        assert child.wait(timeout=30) == 0
        result = json.loads((tmp_path / "result.json").read_text())
        assert len(result["passed"]) == n, result  # the n-th went on once resumed, no later one
        assert result["held"] == THREADS - n, result
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_kill_mode_kills_the_process_at_its_arrival(tmp_path):
    mark = tmp_path / "mark"
    env = {
        **os.environ,
        "COMPACTION_CRASH_AT": "swap:2",
        "COMPACTION_CRASH_HOW": "kill",
        "COMPACTION_CRASH_MARK": str(mark),
    }
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], env=env, timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert mark.exists()
    assert len(list(tmp_path.glob("passed-*"))) <= 1
    assert not (tmp_path / "result.json").exists()
