"""Fixtures of the command-line tests."""

from tests.serving.browser import browser  # noqa: F401 (a real headless Chromium, for the report layout)
