"""moto's S3 server (`moto[server]`, a test extra) on a free port of 127.0.0.1, for the e2e tests
that point the job at an S3 endpoint."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start the server (its output to the open file `log`, `env` added to its environment, e.g.
    `INITIAL_NO_AUTH_ACTION_COUNT` to enforce IAM) and wait until it listens: (process, endpoint)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto server did not start: {open(log.name).read()[-2000:]}") from None
            time.sleep(0.2)
