"""What the driver says about a round that failed as a whole (a Spark job aborted, Spark did not
start, an error while committing): the cause in one line, for the report's `failure` and for each
partition the round did not commit.

A job that Spark aborts reaches the driver as a `Py4JJavaError` whose text is the whole Java stack
trace, executor tracebacks included; the first line of the Java exception's message says what
happened (`Job aborted due to stage failure: ... Python worker exited unexpectedly (crashed)`).
"""

from __future__ import annotations

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
