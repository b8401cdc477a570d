"""A real S3 protocol server for tests: moto's (`moto[server]`, a test extra) on a free port of
127.0.0.1, and the few boto3 calls the tests make to fill and read its buckets."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

KEY, SECRET, REGION = "AKIAEXAMPLEKEY", "s3cr3t-never-logged", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server(log_path: str, env: dict | None = None):
    """Yields the endpoint URL of a moto S3 server started for the block, stopped after it. `env`
    is added to its environment (e.g. `INITIAL_NO_AUTH_ACTION_COUNT`, which turns IAM on)."""
    port = free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server did not start: {open(log_path).read()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def client(endpoint: str):
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name=REGION
    )


def upload(s3, bucket: str, local: str, prefix: str = "logs/", create: bool = True) -> None:
    """Object per file, no directory markers: what `aws s3 sync` does."""
    if create:
        s3.create_bucket(Bucket=bucket)
    for root, _, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            s3.upload_file(path, bucket, prefix + os.path.relpath(path, local))


def objects(s3, bucket: str) -> dict[str, int]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def versions(s3, bucket: str) -> tuple[list[dict], list[dict]]:
    """(object versions, delete markers) of every key of the bucket."""
    vs, ms = [], []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        vs += page.get("Versions", [])
        ms += page.get("DeleteMarkers", [])
    return vs, ms


@contextlib.contextmanager
def throttling(endpoint: str, replies: int):
    """Yields the endpoint of a proxy on 127.0.0.1 that answers the first `replies` requests with
    S3's `503 SlowDown` (a store shedding load) and forwards every other one to `endpoint`."""
    import http.client
    import http.server
    import threading

    target = endpoint.removeprefix("http://")
    left = [replies]
    lock = threading.Lock()

    class Proxy(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                throttle, left[0] = left[0] > 0, left[0] - 1
            if throttle:
                reply = (
                    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                )
                self.send_response(503)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                return
            conn = http.client.HTTPConnection(target, timeout=60)
            conn.request(self.command, self.path, body, dict(self.headers))
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", left
    finally:
        server.shutdown()
        server.server_close()
