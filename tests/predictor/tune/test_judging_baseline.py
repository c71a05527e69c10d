"""Which QSSF a study judges against: ``qssf`` on one GPU type, ``qssf-sized`` on several."""

from __future__ import annotations

from pathlib import Path

from predictor.capacity.inventory import homogeneous_inventory
from predictor.capacity.inventory_sources import load_inventory
from predictor.tune.study import (
    TUNING_BASELINES,
    VALIDATION_POLICIES,
    judging_baseline,
    with_judge,
)

ROOT = Path(__file__).resolve().parents[3]


def test_one_gpu_type_is_judged_against_plain_qssf_and_replays_what_it_did():
    assert judging_baseline(homogeneous_inventory(64)) == "qssf"
    assert with_judge(TUNING_BASELINES, "qssf") == TUNING_BASELINES
    assert with_judge(VALIDATION_POLICIES, "qssf") == VALIDATION_POLICIES


def test_several_gpu_types_are_judged_against_qssf_with_the_base_policys_sizing():
    mixed = load_inventory(ROOT / "data" / "inventory" / "example-cluster.yaml")
    assert len(mixed.gpus_by_type()) == 3
    assert judging_baseline(mixed) == "qssf-sized"
    # plain qssf is still replayed and reported beside it, first
    assert with_judge(TUNING_BASELINES, "qssf-sized") == ("qssf", "qssf-sized", "fifo", "ours")
    assert with_judge(VALIDATION_POLICIES, "qssf-sized") == ("ours", "qssf", "qssf-sized", "fifo", "kueue", "sjf-oracle")
