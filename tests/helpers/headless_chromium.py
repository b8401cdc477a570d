"""Headless Chromium (Debian's `chromium`) for tests that look at a page as a browser renders it,
offline: in a network namespace of its own where the system allows one (root, as in CI), and
always with every request sent to a proxy that is not there and every host name unresolvable.

A test that needs it calls `require()`: without Chromium it is skipped locally, and fails in CI
(env CI=true), where `.ci/run` installs it, so a missing browser never passes silently there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import envkit

NAMES = ("chromium", "chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--force-color-profile=srgb",  # pixels in the page's own sRGB values, not a display's profile
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
TIMEOUT = 120


class ChromiumError(RuntimeError):
    """Chromium ran but did not produce what was asked."""


def find() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def require() -> str:
    """The Chromium binary, or skip the test (fail it in CI)."""
    binary = find()
    envkit.need(
        "the HTML report's rendering",
        None if binary else "chromium is not installed (Debian: apt-get install chromium)",
        ".ci/run installs Debian's chromium",
    )
    return str(binary)


def _offline_prefix() -> list[str]:
    """`unshare --net`, when this process may make a network namespace (no interface but loopback)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net"]
    return []


def _run(binary: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [*_offline_prefix(), binary, *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)


def screenshot(binary: str, url: str, out: str, width: int = 1200, height: int = 900) -> None:
    proc = _run(binary, f"--screenshot={out}", f"--window-size={width},{height}", url)
    if not os.path.exists(out):
        raise ChromiumError(f"no screenshot of {url} (exit {proc.returncode}): {proc.stderr[-2000:]}")


def dump_dom(binary: str, url: str) -> str:
    """The DOM Chromium built from `url`, serialized."""
    proc = _run(binary, "--dump-dom", url)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise ChromiumError(f"no DOM of {url} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout
