import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.nodeinfo.cpulist import cpumask_hex, cpus_from_mask_words, format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("48-63,176-191", tuple(range(48, 64)) + tuple(range(176, 192))),
        ("5", (5,)),
        ("", ()),
        (" 3 , 1 ", (1, 3)),
    ],
    ids=["mixed", "dgx-a100-numa3", "single", "empty", "spaces-unsorted"],
)
def test_parse(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("bad", ["a-3", "3-1", "1,,2", "-1"])
def test_parse_rejects_with_the_offending_part(bad):
    with pytest.raises(ValueError, match="CPU list"):
        parse_cpulist(bad)


@given(st.sets(st.integers(min_value=0, max_value=600), max_size=80))
def test_format_then_parse_round_trips(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


def test_format_uses_shortest_ranges():
    assert format_cpulist([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize(
    ("words", "cpus"),
    [([0b1011], (0, 1, 3)), ([0, 1], (64,)), ([2**64 - 1, 0], tuple(range(64)))],
    ids=["low-bits", "second-word", "full-word"],
)
def test_nvml_mask_words(words, cpus):
    assert cpus_from_mask_words(words) == cpus


@given(st.sets(st.integers(min_value=0, max_value=255), max_size=40))
def test_hex_mask_matches_words(cpus):
    mask = int(cpumask_hex(cpus), 16)
    words = [(mask >> (64 * w)) & (2**64 - 1) for w in range(4)]
    assert cpus_from_mask_words(words) == tuple(sorted(cpus))
