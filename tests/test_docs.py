"""The front door and the docs: README at most 300 lines, every relative link and anchor resolves, and
nothing points outside the repository (a clone has no ../shared)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _slugs(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as '-', repeats numbered."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            s = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(s)
            seen[s] = 0 if n is None else n + 1
            out.add(s if n is None else f"{s}-{n + 1}")
    return out


def _links(text: str):
    fence = False
    for no, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            for m in re.finditer(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
                yield no, m.group(1)


def test_readme_is_at_most_300_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_and_stay_inside_the_repository(page: Path) -> None:
    text = page.read_text()
    broken = []
    for no, target in _links(text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"line {no}: {target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in _slugs(dest.read_text())):
            broken.append(f"line {no}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
    assert "../shared" not in text, "a clone has no ../shared: name the dataset, bundle a sample, or use data/"
