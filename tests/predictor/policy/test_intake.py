"""The intake's rules: GPU request, running placement, predicted end (``predictor.policy.intake``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from predictor.capacity.inventory_sources import load_inventory
from predictor.capacity.layout import ClusterLayout
from predictor.policy import intake
from predictor.policy.intake import Names, Vocabulary

INVENTORY = Path(__file__).resolve().parents[3] / "data/inventory/example-cluster.yaml"


@pytest.fixture(scope="module")
def layout() -> ClusterLayout:
    return ClusterLayout.of(load_inventory(INVENTORY))


def _types(layout: ClusterLayout, row: np.ndarray) -> set[str]:
    return {layout.gpu_types[k] for k in np.flatnonzero(row)}


def test_gpu_requests_in_every_spelling(layout: ClusterLayout) -> None:
    jobs = pd.DataFrame({"job_id": ["a", "b", "c", "d", "e"], "num_gpus": [1.0] * 5,
                         "gpu_type": ["a10", "NVIDIA-A100-SXM4-80GB", "A10|l40s", "H100-80GB", None]})
    pend = intake.pending_jobs(jobs, {}, Vocabulary(), layout, 0.0)
    req = pend.requested_types
    assert _types(layout, req[0]) == {"A10"} and _types(layout, req[1]) == {"A100-80GB"}
    assert _types(layout, req[2]) == {"A10", "L40S"}
    assert not req[3].any()  # a real GPU this cluster lacks: allowed nowhere (the decision says so)
    assert req[4].all()  # no request: any type
    assert pend.gpu_request.tolist() == ["a10", "NVIDIA-A100-SXM4-80GB", "A10|l40s", "H100-80GB", None]


def test_a_name_that_is_no_gpu_is_an_error(layout: ClusterLayout) -> None:
    jobs = pd.DataFrame({"job_id": ["x"], "num_gpus": [1.0], "gpu_type": ["warp-drive"]})
    with pytest.raises(InputError, match=r"job x: unknown GPU type 'warp-drive'; this cluster has A10, L40S, A100-80GB"):
        intake.pending_jobs(jobs, {}, Vocabulary(), layout, 0.0)


def test_running_jobs_hold_known_gpus_then_their_nodes_then_a_gang(layout: ClusterLayout) -> None:
    first = layout.node_first_gpu[layout.node_index["dgx-01"]]
    jobs = pd.DataFrame({
        "job_id": ["known", "on-node", "anywhere", "outside"], "team": ["t", "t", "u", "u"],
        "num_gpus": [2.0, 8.0, 4.0, 4.0], "gpu_type": [None, None, "L40S", None],
        "nodes": [None, "dgx-01", None, "not-in-the-inventory"], "start_ts": [10.0, 20.0, 30.0, 40.0]})
    preds = {"duration_p90_s": np.array([100.0, 200.0, np.nan, 50.0]),
             **{f"slowdown_{c}": np.full(4, 1.5) for c in ("nvlink", "pcie_same_numa", "cross_numa",
                                                            "cross_node_same_rack", "cross_rack")}}
    vocab = Vocabulary(Names(("t", "u")))
    got = intake.running_jobs(jobs, preds, vocab, layout, 100.0, gpus=[[first, first + 1], None, None, None])
    run = got.running
    assert run.job_id.tolist() == ["known", "anywhere"] and got.unplaced == ("on-node", "outside")
    assert run.gpus_of(0).tolist() == [first, first + 1]  # dgx-01 now has 6 free: the 8-GPU job cannot sit there
    assert {layout.gpu_types[layout.gpu_type[g]] for g in run.gpus_of(1)} == {"L40S"}
    assert run.predicted_end_ts[0] == 10.0 + 100.0 * 1.5 and np.isnan(run.predicted_end_ts[1])
    assert run.team.tolist() == [0, 1]
