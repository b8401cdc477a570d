"""The browser check's own rule: no Chromium skips it on a laptop and fails it in CI."""

from __future__ import annotations

import headless_chromium
import pytest


def test_a_missing_chromium_skips_locally_and_fails_in_ci(monkeypatch):
    monkeypatch.setattr(headless_chromium, "find", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        headless_chromium.require()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="rendering cannot run: chromium is not installed"):
        headless_chromium.require()
