from __future__ import annotations

import pytest

from predictor.queue.replan import material

T0 = 1_800_000_000.0


def _decision(**kw) -> dict:
    base = {"action": "wait", "tier": "research", "queue": "nlp", "flavor": "A100-80GB", "placement": None,
            "sla_at_risk": False, "num_gpus": 8, "eviction": None, "reservation": None, "priority": 1_000_000}
    return {**base, **kw}


_RES = {"start_ts": T0, "placement": {"gpu_type": "A100-80GB"}}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, _decision(), True),
        (_decision(), _decision(priority=1_005_000), False),
        (_decision(), _decision(priority=1_020_000), True),
        (_decision(), _decision(action="start"), True),
        (_decision(), _decision(reservation=_RES), True),
        (_decision(reservation=_RES), _decision(reservation={**_RES, "start_ts": T0 + 30}), False),
        (_decision(reservation=_RES), _decision(reservation={**_RES, "start_ts": T0 + 600}), True),
        (_decision(), _decision(sla_at_risk=True), True),
    ],
    ids=["first", "aging", "priority-jump", "action", "reserved", "res-jitter", "res-moved", "sla"],
)
def test_material_changes(old, new, expected) -> None:
    assert material(old, new) is expected
