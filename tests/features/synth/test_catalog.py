"""Population and families: skewed teams, working GPU requests, occasional run edits."""

from __future__ import annotations

import numpy as np
import pytest

from features.synth import PROFILES, get_profile
from features.synth.catalog import HEADROOM, draw_families, draw_population, peak_of, vary_runs
from features.synth.hardware import gpu_array
from features.synth.memory_truth import METHODS
from features.synth.zoo import zoo_array


@pytest.fixture(scope="module", params=PROFILES)
def families(request):
    profile = get_profile(request.param)
    rng = np.random.default_rng(4)
    pop = draw_population(rng, 30_000, profile)
    return profile, pop, draw_families(rng, 3_000, pop, profile)


def _family_peak(f):
    return peak_of(f.model, f.finetune, f.precision, f.optimizer, f.batch, f.seq, f.gpu, f.num_gpus, f.zero_stage,
                   f.checkpointing, f.flash, f.fragmentation, f.overhead_mib, f.nccl_mib, f.lora_fraction)


def test_population_is_skewed(families):
    _, pop, _ = families
    team_share = np.bincount(pop.user_team) / len(pop.user_team)
    assert team_share.max() > 3 / len(pop.team_names)
    assert len(set(pop.user_names)) == len(pop.user_names)


def test_every_family_config_fits_its_gpus_with_headroom(families):
    profile, _, f = families
    assert (_family_peak(f) <= gpu_array("memory_mib")[f.gpu] * HEADROOM).all()
    gpus = f.num_gpus.astype(int)
    assert ((gpus & (gpus - 1)) == 0).all() and gpus.max() <= profile.max_gpus
    assert (f.zero_stage[gpus == 1] == 0).all()


def test_gpu_count_follows_model_state_size(families):
    _, _, f = families
    params = zoo_array("params")[f.model]
    full = f.finetune == METHODS.index("full")
    big = full & (params > 60e9)
    small = full & (params < 1e9)
    assert np.median(f.num_gpus[small]) == 1
    if big.any():
        assert (f.num_gpus[big] >= 8).all()
        assert (f.zero_stage[big] == 3).all()  # 16 bytes x 70B cannot be replicated


def test_run_edits_are_occasional_and_their_peaks_consistent(families):
    profile, _, f = families
    rng = np.random.default_rng(5)
    jobs = rng.integers(0, len(f), 20_000)
    runs = vary_runs(rng, f, jobs, profile)
    changed = (runs.batch != f.batch[jobs]) | (runs.gpu != f.gpu[jobs]) | (runs.num_gpus != f.num_gpus[jobs]) \
        | (runs.seq != f.seq[jobs])
    assert 0.1 < changed.mean() < 0.3
    same = ~changed
    np.testing.assert_allclose(runs.peak_mib[same], _family_peak(f)[jobs][same], rtol=0.1)
    oom = runs.peak_mib > gpu_array("memory_mib")[runs.gpu]
    assert oom[same].mean() < 0.001 and oom[changed].mean() > 0.05
