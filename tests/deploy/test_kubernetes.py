"""Every Kustomize overlay renders with ``kubectl kustomize`` and every object it renders validates
against the real Kubernetes OpenAPI schemas (and the Kueue CRDs); then what each overlay promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.settings import Settings
from tests.deploy.manifests import (
    KUSTOMIZE,
    OVERLAYS,
    command_problem,
    containers,
    name_of,
    pod_specs,
    reference_problems,
    render,
    schema_problems,
)

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
#: Environment variables the commands read that are not Settings fields.
OTHER_ENV = {"PREDICTOR_SYNC_TOKEN", "PREDICTOR_HISTORY_FORMAT", "PREDICTOR_HISTORY_DIR", "PREDICTOR_WORK_DIR",
             "MLFLOW_TRACKING_URI", "HOME", "USER"}


@pytest.fixture(scope="module")
def rendered(kubectl: str) -> dict[str, list[dict]]:
    return {name: render(KUSTOMIZE / "overlays" / name) for name in OVERLAYS}


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_overlays_exist() -> None:
    assert {"small", "production"} <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates(rendered, overlay: str, crds) -> None:
    objs = rendered[overlay]
    assert len(objs) >= 10
    problems = [f"{name_of(o)}: {p}" for o in objs for p in schema_problems(o, crds)]
    assert not problems, "\n".join(problems)
    assert not reference_problems(objs), "\n".join(reference_problems(objs))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespaced_objects_land_in_one_namespace(rendered, overlay: str) -> None:
    objs = rendered[overlay]
    spaces = {o["metadata"].get("namespace") for o in objs if o["kind"] not in CLUSTER_SCOPED}
    assert spaces == {"gpu-predictor"}
    assert all("namespace" not in o["metadata"] for o in objs if o["kind"] in CLUSTER_SCOPED)
    binding = by_kind(objs, "ClusterRoleBinding")["predictor-sync"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "predictor-sync", "namespace": "gpu-predictor"}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_commands_parse_and_env_names_are_known(rendered, overlay: str) -> None:
    known = {f"PREDICTOR_{name.upper()}" for name in Settings.model_fields} | OTHER_ENV
    for where, c in containers(rendered[overlay]).items():
        if c["command"][0] == "predictor":
            assert command_problem(c["command"] + c.get("args", [])) is None, where
        names = {e["name"] for e in c.get("env") or []}
        assert names <= known, f"{where}: unknown variables {sorted(names - known)}"
    config = next(o for o in rendered[overlay] if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(
        "predictor-config"))
    assert set(config["data"]) <= known


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_probes_tokens_and_scraping(rendered, overlay: str) -> None:
    from serving.routers.health import router

    routes = {r.path for r in router.routes}
    api = by_kind(rendered[overlay], "Deployment")["predictor-api"]
    pod = api["spec"]["template"]
    c = pod["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"/healthz", "/readyz", "/metrics"} <= routes
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == "/metrics"
    assert notes["prometheus.io/port"] == str(c["ports"][0]["containerPort"])
    env = {e["name"]: e for e in c["env"]}
    tokens = Path(env["PREDICTOR_TOKENS_FILE"]["value"])
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(tokens.parent))
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "predictor-tokens"
    assert env["PREDICTOR_BIND"]["value"].endswith(f":{c['ports'][0]['containerPort']}")


def test_small_is_one_replica_on_sqlite_with_a_claim(rendered) -> None:
    objs = rendered["small"]
    api = by_kind(objs, "Deployment")["predictor-api"]
    assert api["spec"]["replicas"] == 1 and api["spec"]["strategy"] == {"type": "Recreate"}
    c = api["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert "PREDICTOR_DATABASE_URL" not in env and env["PREDICTOR_WORKERS"]["value"] == "1"  # SQLite in workingDir
    state = next(v for v in api["spec"]["template"]["spec"]["volumes"] if v["name"] == "state")
    assert state == {"name": "state", "persistentVolumeClaim": {"claimName": "predictor-state"}}
    assert next(m for m in c["volumeMounts"] if m["name"] == "state")["mountPath"] == c["workingDir"]
    assert "predictor-state" in by_kind(objs, "PersistentVolumeClaim")
    assert not by_kind(objs, "PodDisruptionBudget")  # a budget on one replica would block every node drain


def test_production_is_postgres_replicated_with_budget_and_anti_affinity(rendered) -> None:
    objs = rendered["production"]
    api = by_kind(objs, "Deployment")["predictor-api"]
    assert api["spec"]["replicas"] >= 2
    pod = api["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["PREDICTOR_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "predictor-database", "key": "url"}
    assert int(env["PREDICTOR_WORKERS"]["value"]) >= 2
    terms = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= \
        api["spec"]["template"]["metadata"]["labels"].items()
    pdb = by_kind(objs, "PodDisruptionBudget")["predictor-api"]
    assert pdb["spec"]["minAvailable"] < api["spec"]["replicas"]
    sync = by_kind(objs, "Deployment")["predictor-sync"]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e for e in sync["env"]}["PREDICTOR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == \
        "predictor-database"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_sync_has_the_least_rbac(rendered, overlay: str) -> None:
    objs = rendered[overlay]
    role = by_kind(objs, "ClusterRole")["predictor-sync"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    reads = {("kueue.x-k8s.io", r, v) for r in ("workloads", "localqueues", "clusterqueues", "resourceflavors")
             for v in ("get", "list", "watch")}
    assert granted == reads | {("kueue.x-k8s.io", "workloads", "patch"), ("batch", "jobs", "get"),
                               ("batch", "jobs", "patch")}
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    accounts = by_kind(objs, "ServiceAccount")
    for name, obj in by_kind(objs, "Deployment").items():
        spec = pod_specs(obj)[0]
        token = spec.get("automountServiceAccountToken", accounts[spec["serviceAccountName"]].get(
            "automountServiceAccountToken", True))
        assert token == (name == "predictor-sync"), f"{name}: only the sync loop holds an API token"
    sync = by_kind(objs, "Deployment")["predictor-sync"]
    assert sync["spec"]["replicas"] == 1 and sync["spec"]["strategy"]["type"] == "Recreate"
    argv = sync["spec"]["template"]["spec"]["containers"][0]["command"] + \
        sync["spec"]["template"]["spec"]["containers"][0]["args"]
    assert argv[:4] == ["predictor", "sync", "--target", "kueue"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_retraining_cronjob(rendered, overlay: str) -> None:
    job = by_kind(rendered[overlay], "CronJob")["predictor-retrain"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_specs(job)[0]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    c = pod["containers"][0]
    assert "MLFLOW_TRACKING_URI" not in {e["name"] for e in c["env"]}  # from the ConfigMap, not the manifest
    config = next(o for o in rendered[overlay] if o["kind"] == "ConfigMap" and
                  o["metadata"]["name"] == c["envFrom"][0]["configMapRef"]["name"])
    assert config["data"]["MLFLOW_TRACKING_URI"]
    script = c["args"][0]
    assert [w for w in ("predictor ingest", "predictor train", "predictor promote") if w in script] == \
        ["predictor ingest", "predictor train", "predictor promote"]


def test_base_site_is_the_shipped_example_and_loads() -> None:
    """The base's site ConfigMap files are the example site (kept identical) and load as the service loads them."""
    from predictor.capacity.inventory_sources import load_inventory
    from predictor.policy.presets import load_policy

    site = KUSTOMIZE / "base" / "site"
    root = KUSTOMIZE.parents[1] / "data"
    assert (site / "policy.yaml").read_text() == (root / "policy" / "example-site.yaml").read_text()
    assert (site / "inventory.yaml").read_text() == (root / "inventory" / "example-cluster.yaml").read_text()
    assert set(load_policy(site / "policy.yaml").teams) == {"nlp", "vision", "speech", "platform"}
    assert load_inventory(str(site / "inventory.yaml")).total_gpus == 64
