"""Profiles: lookup, internal consistency, and the bundled published numbers against the source file."""

from __future__ import annotations

import csv

import pytest

from features.errors import InputError
from features.synth import PROFILES, PUBLISHED, TIERS, get_profile
from features.synth.hardware import GPU_SPECS
from features.synth.zoo import MODEL_ZOO


def test_lookup_is_case_insensitive_and_unknown_names_are_listed():
    assert PROFILES == ("philly", "helios")
    assert get_profile(" Philly ").name == "philly"
    with pytest.raises(InputError, match="philly, helios"):
        get_profile("gavel")


@pytest.mark.parametrize("name", PROFILES)
def test_profile_is_complete(name):
    p = get_profile(name)
    assert p.cluster in PUBLISHED
    assert set(p.gpu_mix) <= set(GPU_SPECS) and sum(p.gpu_mix.values()) > 0
    assert len(p.model_weights) == len(MODEL_ZOO)
    assert set(p.tier_mix) == set(TIERS) == set(p.log_duration_base)
    assert p.max_gpus & (p.max_gpus - 1) == 0  # a power of two
    assert all(sum(row) == pytest.approx(1.0) for row in p.finetune_by_size.values())


@pytest.mark.shared_data
def test_bundled_numbers_match_the_published_csv(shared_file):
    path = shared_file("stats/cluster_summary.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(PUBLISHED)
    for cluster, stats in PUBLISHED.items():
        for key, value in stats.items():
            raw = rows[cluster][key].strip()
            assert (value is None and raw == "") or value == pytest.approx(float(raw)), (cluster, key)
