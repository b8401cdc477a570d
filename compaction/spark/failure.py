"""What the driver says about a round that failed as a whole (a Spark job aborted, Spark did not
start, an error while committing): the cause in one line, for the report's `failure` and for each
partition the round did not commit.

A job that Spark aborts reaches the driver as a `Py4JJavaError` whose text is the whole Java stack
trace, executor tracebacks included; the first line of the Java exception's message says what
happened (`Job aborted due to stage failure: ... Python worker exited unexpectedly (crashed)`).
"""

from __future__ import annotations

import re

MAX_CHARS = 500  # Spark's abort lines name the stage, task, host and cause within this


def one_line(exc: BaseException) -> str:
    """`<class>: <first line of the message>`, at most `MAX_CHARS` long; for a Java exception its
    own class and message (asked of the JVM, which may be gone: then what Python holds)."""
    name, text = type(exc).__name__, None
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            name, text = java.getClass().getSimpleName(), java.getMessage() or java.toString()
        except Exception:
            text = None
    if text is None:
        try:
            text = str(exc)
        except Exception:
            text = ""
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    line = f"{name}: {line}" if line else name
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."


_PYTHON_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\n.*?(?=\n\s*\n|\n\tat |\Z)", re.S)


def task_traceback(exc: BaseException) -> str | None:
    """The Python traceback of the task that aborted a Spark job, from the error the driver got
    (or the error it caused: `TaskFailed`), or None when none holds one (a worker killed, Spark
    not starting)."""
    seen = 0
    while exc is not None and seen < 5:
        try:
            found = _PYTHON_TRACEBACK.search(str(exc))
        except Exception:
            found = None  # the JVM that held the message is gone
        if found:
            return found.group(0)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
