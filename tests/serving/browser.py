"""A real headless Chromium (Debian's, through Playwright) for the dashboard and docs tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import require

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser() -> Iterator:
    require(shutil.which(CHROMIUM) is not None or Path(CHROMIUM).exists(), f"Debian's chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def offline(page, allowed_host: str = "127.0.0.1") -> list[str]:
    """Abort every request of ``page`` that leaves ``allowed_host`` (as on a machine without internet);
    returns the list the aborted URLs are appended to."""
    left: list[str] = []

    def route(r) -> None:
        url = r.request.url
        if urlsplit(url).hostname in (allowed_host, "localhost") or url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            left.append(url)
            r.abort()

    page.route("**/*", route)
    return left
