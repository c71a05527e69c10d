"""The replay report reads well in a real Chromium at 1280 and 1920 px (issue 12, item 12).

Before: the metric and extra tables were wider than the page, so ``sla_misses`` and ``preemptions``
hid behind a horizontal scroll; five stacked team-share plots repeated one legend; "What was
replayed" was a raw dict dump with an epoch float.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from features.synth import generate
from predictor.cli import main

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]
POLICIES = ["fifo", "qssf", "kueue", "ours", "sjf-oracle"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("replay")
    generate(700, seed=4, cluster_gpus=32, target_load=0.9).to_parquet(folder / "jobs.parquet", index=False)
    args = ["simulate", "--jobs", str(folder / "jobs.parquet"), "--cluster", "32", "--out", str(folder / "out"),
            "--no-progress"]
    for p in POLICIES:
        args += ["--policy", p]
    assert main(args) == 0
    return folder / "out" / "report.html"


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_column_is_visible_without_scrolling(browser, report: Path, width: int) -> None:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(report.as_uri())
    shot = Path(os.environ.get("PREDICTOR_SCREENSHOT_DIR", report.parent)) / f"report-{width}.png"
    page.screenshot(path=str(shot), full_page=True)
    layout = page.evaluate("""() => ({
        doc: [document.documentElement.scrollWidth, window.innerWidth],
        tables: [...document.querySelectorAll("table")].map((t) => [t.scrollWidth, t.parentElement.clientWidth]),
        cells: [...document.querySelectorAll("th, td")].filter((c) => c.getBoundingClientRect().right > window.innerWidth)
                 .map((c) => c.textContent),
        rows: [...document.querySelectorAll("tr")].map((r) => r.cells[0].textContent),
        heads: [...document.querySelector("table").querySelectorAll("thead th")].map((c) => c.textContent),
        run: document.querySelector("dl.run").innerText,
        images: document.querySelectorAll("img").length,
    })""")
    assert layout["doc"][0] <= layout["doc"][1], layout["doc"]
    assert all(scroll <= room for scroll, room in layout["tables"]), layout["tables"]
    assert layout["cells"] == []
    assert any("sla_misses" in r for r in layout["rows"]) and any("preemptions" in r for r in layout["rows"])
    assert layout["heads"][1:] == POLICIES
    assert not re.search(r"\\b\\d{10}\\.\\d", layout["run"]), layout["run"]  # no epoch floats
    assert "UTC" in layout["run"] and "GPUs on" in layout["run"] and "{" not in layout["run"]
    assert layout["images"] == 3  # one team-share figure, with one legend, for every policy
