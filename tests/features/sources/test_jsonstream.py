import io
from pathlib import Path

import pytest

import features.sources.jsonstream as jsonstream
from features.errors import InputError
from features.sources.jsonstream import iter_records


@pytest.fixture(params=[1 << 20, 5], ids=["big-blocks", "5-char-blocks"])
def block(request, monkeypatch):
    """Run each case with normal blocks and with tiny ones, so records straddle every boundary."""
    monkeypatch.setattr(jsonstream, "_BLOCK", request.param)


@pytest.mark.parametrize(
    "text, records",
    [
        ('[{"a": 1}, {"b": [1, 2, {"c": "x y z"}]}]', [{"a": 1}, {"b": [1, 2, {"c": "x y z"}]}]),
        ('{"apiVersion": "v1", "items": [{"x": 1}, {"y": 2}], "kind": "List"}', [{"x": 1}, {"y": 2}]),
        ('{"kind": "List", "metadata": {}, "items": []}', []),
        ('{"a": 1}\n{"b": 2}\n', [{"a": 1}, {"b": 2}]),
        ("[]", []),
        ("  \n", []),
        ('[{"s": "brace } and ] inside"}]', [{"s": "brace } and ] inside"}]),
    ],
)
def test_shapes(block, text, records):
    assert list(iter_records(io.StringIO(text), Path("t.json"))) == records


@pytest.mark.parametrize("text", ['[{"a": 1},, {"b": 2}]', '[{"a": }]', '{"items": [1, 2}', "nonsense"])
def test_invalid_json_names_the_file(block, text):
    with pytest.raises(InputError, match=r"t\.json: invalid JSON"):
        list(iter_records(io.StringIO(text), Path("t.json")))
