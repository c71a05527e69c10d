"""Inputs of the wrong kind are one short, printable error line, exit 2, nothing written (issue 12, item 2).

A binary file in any format, and a text file where no line parses as the format named, used to exit 0
with "kept 0" and an empty table (SWF) or echo about a kilobyte of raw bytes with terminal control
characters (sacct and the CSV formats).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from features.sources import FORMATS
from predictor.cli import main

#: The start of an ELF executable and bytes that are not UTF-8: what a wrong file looks like.
BINARY = (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00>\x00\x01\x1b[2J\x1b]0;pwned\x07" + bytes(range(256)) * 8)
#: Short text of another format: a CSV given as SWF, Kueue JSON given as sacct...
TEXT = "name,value\nfirst,1\nsecond,2\n"


def _check(code: int, err: str, out: Path, path: Path) -> str:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], err
    assert all(c.isprintable() for c in lines[0]), repr(lines[0])
    assert not out.exists() and [p for p in os.listdir(out.parent) if p.startswith(".")] == []
    return lines[0]


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_binary_file_is_refused_in_every_format(fmt: str, compressed: bool, tmp_path: Path, capsys) -> None:
    path = tmp_path / ("input.gz" if compressed else "input")
    path.write_bytes(gzip.compress(BINARY) if compressed else BINARY)
    out = tmp_path / "out" / "jobs.parquet"
    line = _check(main(["ingest", "--format", fmt, str(path), "--out", str(out), "--no-progress"]),
                  capsys.readouterr().err, out, path)
    assert "binary data" in line and len(line) <= 200 + len(str(path)), line


def test_a_file_where_no_line_parses_as_swf_is_an_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "queue.csv"
    path.write_text(TEXT)
    out = tmp_path / "out" / "jobs.parquet"
    line = _check(main(["ingest", "--format", "swf", str(path), "--out", str(out), "--no-progress"]),
                  capsys.readouterr().err, out, path)
    assert "no row parses as swf" in line and "3 rejected" in line


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f not in ("kueue", "philly")])
def test_column_names_are_quoted_short_and_escaped(fmt: str, tmp_path: Path, capsys) -> None:
    """A header of control characters and a very long name: at most an escaped excerpt is quoted."""
    path = tmp_path / "weird.txt"
    path.write_text("\x1b[31mred\x1b[0m|" + "x" * 2000 + "|\x07bell\n1|2|3\n", encoding="utf-8")
    out = tmp_path / "out" / "jobs.parquet"
    code = main(["ingest", "--format", fmt, str(path), "--out", str(out), "--no-progress"])
    line = _check(code, capsys.readouterr().err, out, path)
    assert "x" * 120 not in line, line


def test_rows_that_parse_but_fail_validation_still_succeed_with_rejects(tmp_path: Path, capsys) -> None:
    """Only unparseable input is an error: parsed rows that fail validation go to the rejects file."""
    path = tmp_path / "t.swf"
    path.write_text("1 -5 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n")  # a negative submit time
    out = tmp_path / "jobs.parquet"
    assert main(["ingest", "--format", "swf", str(path), "--out", str(out), "--no-progress"]) == 0
    assert (tmp_path / "jobs.rejects.parquet").exists()
