"""Stream the records of a JSON job log without loading the whole file.

Accepted shapes (what ``kubectl get ... -o json`` and the Philly trace write, plus JSON Lines):

- a top-level array ``[{...}, {...}]``: each element is a record;
- an object with an ``items`` array (a Kubernetes ``List``): each item is a record;
- any other top-level object: the object itself is a record; several objects may follow one
  another (JSON Lines / concatenated JSON).

Only the top level is streamed; each record is decoded whole with :mod:`json` (records are small).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from features.errors import InputError

_WS = " \t\r\n"
_BLOCK = 1 << 20


class _Buffer:
    """A growing window over a text stream with a read position."""

    def __init__(self, stream: IO[str], path: Path) -> None:
        self.stream, self.path = stream, path
        self.text, self.pos, self.eof, self.consumed = "", 0, False, 0

    def more(self, size: int = _BLOCK) -> bool:
        """Append up to ``size`` more characters; False at end of input."""
        if self.eof:
            return False
        chunk = self.stream.read(size)
        if not chunk:
            self.eof = True
            return False
        self.consumed += self.pos
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """Next non-whitespace character ('' at end of input), without consuming it."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            self.fail(f"expected one of {chars!r}, found {ch or 'end of file'!r}")
        self.pos += 1
        return ch

    def value(self) -> Any:
        """Decode one JSON value at the position (reading more input while it is incomplete)."""
        decoder = json.JSONDecoder()
        self.peek()
        while True:
            try:
                obj, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                # incomplete or invalid: read more (doubling, so a broken big file costs O(n))
                if self.more(max(_BLOCK, len(self.text) - self.pos)):
                    continue
                self.fail(exc.msg, self.consumed + exc.pos)
            else:
                if end == len(self.text) and not self.eof and self.text[self.pos] not in "{[\"":
                    # a bare number may continue in the next block
                    if self.more():
                        continue
                self.pos = end
                return obj

    def fail(self, msg: str, offset: int | None = None) -> None:
        where = offset if offset is not None else self.consumed + self.pos
        raise InputError(f"{self.path}: invalid JSON near character {where}: {msg}")


def iter_records(stream: IO[str], path: Path) -> Iterator[dict]:
    """Yield the records of a JSON log (see the module docstring for the accepted shapes)."""
    buf = _Buffer(stream, path)
    while True:
        ch = buf.peek()
        if not ch:
            return
        if ch == "[":
            yield from _array(buf)
        elif ch == "{":
            yield from _object(buf)
        else:
            buf.fail(f"expected '[' or '{{' at the top level, found {ch!r}")


def _array(buf: _Buffer) -> Iterator[Any]:
    buf.expect("[")
    if buf.peek() == "]":
        buf.pos += 1
        return
    while True:
        yield buf.value()
        if buf.expect(",]") == "]":
            return


def _object(buf: _Buffer) -> Iterator[Any]:
    """A top-level object: stream its ``items`` if it has them, else yield the object itself."""
    buf.expect("{")
    fields: dict[str, Any] = {}
    is_list = False
    if buf.peek() == "}":
        buf.pos += 1
    else:
        while True:
            if buf.peek() != '"':
                buf.fail("expected a quoted key")
            key = buf.value()
            buf.expect(":")
            if key == "items" and buf.peek() == "[":
                is_list = True
                yield from _array(buf)
            else:
                fields[key] = buf.value()
            if buf.expect(",}") == "}":
                break
    if not is_list:
        yield fields
