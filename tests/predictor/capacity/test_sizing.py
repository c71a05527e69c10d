import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.layout import ClusterLayout
from predictor.capacity.sizing import size_jobs, size_request
from predictor.policy.config import SizingConfig

# A10 24 GiB (0.6/h), L40S 45 GiB (1.1/h), A100-80GB 80 GiB (1.6/h)
INV = Inventory(nodes=(Node("a", "A10", 8), Node("l", "L40S", 4), Node("d", "A100-80GB", 8)))
LAY = ClusterLayout.of(INV)
CFG = SizingConfig(margin_fraction=0.1, margin_mib=1024)


@pytest.mark.parametrize(
    "peak, gpus, milli, requested, flavor, warn",
    [
        (None, 1, 1000, (), "A10", ""),
        (10_000, 1, 1000, (), "A10", ""),
        (30_000, 1, 1000, (), "L40S", ""),
        (60_000, 8, 1000, (), "A100-80GB", ""),
        (60_000, 1, 1000, ("A10",), "A100-80GB", "too small"),
        (10_000, 1, 1000, ("A100-80GB",), "A100-80GB", "wastes capacity"),
        (100_000, 2, 1000, (), "A100-80GB", "fits no GPU type"),  # the largest GPUs: smallest OOM risk
        (30_000, 8, 1000, (), "A100-80GB", ""),  # L40S pool has only 4 GPUs
        (10_000, 1, 300, (), "L40S", ""),  # a 0.3 share of an A10 holds 7 GiB
        (None, 1, 1000, ("H100-80GB",), None, "no GPU of the requested type H100-80GB"),
    ],
    ids=["no prediction", "small", "mid", "big gang", "request too small", "request wasteful", "fits nowhere",
         "pool too small", "gpu share", "type missing"],
)
def test_size_request_table(peak, gpus, milli, requested, flavor, warn):
    advice = size_request(LAY, CFG, num_gpus=gpus, gpu_milli=milli, peak_upper_mib=peak, requested=requested)
    assert advice.flavor == flavor
    joined = " | ".join(advice.warnings)
    if warn:
        assert warn in joined
    else:
        assert advice.warnings == ()


def test_keep_mode_keeps_a_too_small_request_and_warns():
    advice = size_request(LAY, SizingConfig(on_too_small="keep"), num_gpus=1, peak_upper_mib=60_000,
                          requested=("A10",))
    assert advice.flavor == "A10" and "OOM risk; kept as requested" in advice.warnings[0]


def test_predictions_ignored_when_sizing_disabled():
    advice = size_request(LAY, SizingConfig(use_predictions=False), num_gpus=1, peak_upper_mib=60_000)
    assert advice.flavor == "A10" and advice.allowed == ("A10", "L40S", "A100-80GB")


def test_fits_nowhere_suggests_a_sharded_count():
    advice = size_request(LAY, CFG, num_gpus=2, peak_upper_mib=100_000)
    assert ">= 3 x A100-80GB" in advice.warnings[0]  # 2 x 100 GB over 80 GB GPUs


def test_vectorised_sizing_matches_single():
    peaks = np.array([np.nan, 10_000, 30_000, 60_000, 100_000])
    out = size_jobs(LAY, CFG, num_gpus=np.ones(5, dtype=int), gpu_milli=np.full(5, 1000),
                    peak_upper_mib=peaks, requested_types=None)
    singles = [size_request(LAY, CFG, num_gpus=1, peak_upper_mib=None if np.isnan(p) else p).flavor for p in peaks]
    assert [LAY.gpu_types[k] for k in out.flavor] == singles
    assert out.need_mib[1] == pytest.approx(10_000 * 1.1 + 1024)


def test_job_sizing_kept_per_row_equals_sizing_the_rows():
    from predictor.policy.incremental import JobSizing

    rng = np.random.default_rng(3)
    n = 200
    num = rng.choice([1, 2, 4, 8], n)
    milli = rng.choice([1000, 1000, 500, 250], n)
    peak = np.where(rng.random(n) < 0.3, np.nan, rng.uniform(1000, 120_000, n))
    req = rng.random((n, LAY.n_types)) < 0.7
    kept = JobSizing(LAY, CFG, num_gpus=num, gpu_milli=milli, peak_upper_mib=peak, requested_types=req)
    peak = peak.copy()
    for j in (5, 17, 150):  # memory learnt from a crash
        peak[j] = 70_000.0
        kept.update(j, peak_upper_mib=70_000.0)
    rows = rng.permutation(n)[:77]
    want = size_jobs(LAY, CFG, num_gpus=num[rows], gpu_milli=milli[rows], peak_upper_mib=peak[rows],
                     requested_types=req[rows])
    got = kept.take(rows)
    for name in ("allowed", "flavor", "too_small", "wasteful", "fits_nowhere", "requested_missing"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert np.array_equal(got.need_mib, want.need_mib, equal_nan=True)


def test_types_below_the_bound_hold_the_point_estimate_and_were_asked_for():
    # bound 60 GB: only the A100 holds it; point 20 GB: the A10 and the L40S hold it (with the margins)
    peak = np.array([60_000.0, 60_000.0, 60_000.0, 60_000.0])
    point = np.array([20_000.0, 30_000.0, np.nan, 20_000.0])
    req = np.ones((4, LAY.n_types), dtype=bool)
    req[3] = [t == "A100-80GB" or t == "L40S" for t in LAY.gpu_types]
    out = size_jobs(LAY, CFG, num_gpus=np.ones(4, dtype=int), gpu_milli=np.full(4, 1000), peak_upper_mib=peak,
                    requested_types=req, peak_point_mib=point)
    names = LAY.gpu_types
    below = [[names[k] for k in np.flatnonzero(row)] for row in out.below]
    assert [names[k] for k in out.flavor] == ["A100-80GB"] * 4  # the flavor still holds the bound
    assert below == [["A10", "L40S"], ["L40S"], [], ["L40S"]]  # 30 GB + margins is more than an A10
    off = size_jobs(LAY, SizingConfig(start_below_bound=False), num_gpus=np.ones(4, dtype=int),
                    gpu_milli=np.full(4, 1000), peak_upper_mib=peak, requested_types=req, peak_point_mib=point)
    assert off.below is None
    anything = size_jobs(LAY, SizingConfig(below_bound_point_fraction=0.0), num_gpus=np.ones(4, dtype=int),
                         gpu_milli=np.full(4, 1000), peak_upper_mib=peak, requested_types=req, peak_point_mib=point)
    assert [[names[k] for k in np.flatnonzero(row)] for row in anything.below] == [
        ["A10", "L40S"], ["A10", "L40S"], [], ["L40S"]]  # any type asked for, where the point is known
    assert size_jobs(LAY, CFG, num_gpus=np.ones(4, dtype=int), gpu_milli=np.full(4, 1000), peak_upper_mib=peak,
                     requested_types=req).below is None  # no point estimate given


def test_job_sizing_keeps_the_types_below_the_bound_and_a_crash_removes_them():
    from predictor.policy.incremental import JobSizing

    peak, point = np.array([60_000.0, 10_000.0]), np.array([20_000.0, 8_000.0])
    kept = JobSizing(LAY, CFG, num_gpus=np.ones(2, dtype=int), gpu_milli=np.full(2, 1000), peak_upper_mib=peak,
                     requested_types=None, peak_point_mib=point)
    assert kept.take(np.array([0])).below[0].tolist() == [True, True, False]
    assert kept.take(np.array([1])).below is None  # the A10 holds its bound: nothing below it
    kept.update(0, peak_upper_mib=70_000.0)  # a crash taught it: 70 GB, bound and point
    assert kept.take(np.array([0, 1])).below is None


def test_a_crash_leaves_no_type_below_the_bound_even_at_fraction_0():
    from predictor.policy.incremental import JobSizing

    cfg = SizingConfig(below_bound_point_fraction=0.0)
    kept = JobSizing(LAY, cfg, num_gpus=np.ones(1, dtype=int), gpu_milli=np.full(1, 1000),
                     peak_upper_mib=np.array([60_000.0]), requested_types=None, peak_point_mib=np.array([20_000.0]))
    assert kept.take(np.array([0])).below[0].tolist() == [True, True, False]
    kept.update(0, peak_upper_mib=60_000.0)  # the same bound, now known: it needs an A100
    assert kept.take(np.array([0])).below is None
