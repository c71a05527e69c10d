"""The API takes residency and checkpoint fields (docs/residency.md): a constrained job is decided
where its constraint allows, and a malformed constraint is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.app import create_app
from serving.service import build_service
from serving.settings import Settings
from tests.serving.conftest import TOKENS, TestClient, auth
from tests.serving.doubles import no_model_slot

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "inventory" / "example-regions.yaml"


@pytest.fixture
def regional(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'state.db'}",
                        mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", tokens=list(TOKENS.values()),
                        inventory_file=EXAMPLE)
    with TestClient(create_app(service=build_service(settings, model=no_model_slot()))) as c:
        yield c


def test_a_constrained_job_is_decided_where_it_may_run(regional: TestClient) -> None:
    jobs = [{"job_id": "eu", "num_gpus": 8, "constraints": "region=us-east", "checkpoint_kind": "system",
             "checkpoint_size_gb": 120, "data_class": "public"},
            {"job_id": "secret", "num_gpus": 4, "constraints": "label=sensitive"},
            {"job_id": "nowhere", "num_gpus": 4, "constraints": "region=ap-south"}]
    r = regional.post("/v1/score", json={"jobs": jobs}, headers=auth("scheduler"))
    assert r.status_code == 200, r.text
    by_id = {x["job_id"]: x["decision"] for x in r.json()["results"]}
    # data_class=public is listed nowhere in the default policy: only nodes labelled data_class=public qualify
    assert by_id["eu"]["action"] == "reject" and "data_class=public" in by_id["eu"]["reason"]
    assert by_id["secret"]["action"] == "start" and by_id["secret"]["constraint"] == "label=sensitive"
    assert all(n["node"].startswith("dgx-") for n in by_id["secret"]["placement"]["gpus_by_node"])
    assert by_id["nowhere"]["action"] == "reject" and "region=ap-south" in by_id["nowhere"]["reason"]
    one = regional.post("/v1/score", json={"job_id": "us", "num_gpus": 8, "constraints": "region=us-east"},
                        headers=auth("scheduler")).json()["results"][0]["decision"]
    assert one["action"] == "start" and all(n["node"].startswith("a10-") for n in one["placement"]["gpus_by_node"])


@pytest.mark.parametrize("field, value", [("constraints", "region"), ("checkpoint_kind", "sometimes"),
                                          ("checkpoint_size_gb", -1)])
def test_bad_residency_or_checkpoint_fields_are_422_naming_the_field(regional: TestClient, field, value) -> None:
    r = regional.post("/v1/score", json={"job_id": "x", "num_gpus": 1, field: value}, headers=auth("scheduler"))
    assert r.status_code == 422
    assert any(field in e["loc"] for e in r.json()["detail"]), r.json()
