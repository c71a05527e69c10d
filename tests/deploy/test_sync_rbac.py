"""The sync loop's ClusterRole covers every API call the Kueue adapter makes, and nothing in it goes
unused: the adapter runs against the API emulator while each request it sends is checked against
the rules ``kubectl kustomize`` rendered."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from predictor.adapters.kueue.adapter import KueueAdapter
from predictor.adapters.retry import RetryPolicy
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Victim
from tests.deploy.manifests import KUSTOMIZE, render
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.predictor.adapters.kueue_objects import batch_job, workload

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = 1_795_990_000.0
_PATH = re.compile(r"/apis/(?P<group>[^/]+)/[^/]+(?:/namespaces/[^/]+)?/(?P<resource>[^/?]+)(?:/(?P<name>[^/?]+))?")
_VERBS = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update", "DELETE": "delete"}


def _granted(kubectl: str) -> set[tuple[str, str, str]]:
    objs = render(KUSTOMIZE / "overlays" / "small")
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "predictor-sync")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _recording(api: client.ApiClient, calls: list[tuple[str, str, str]]) -> None:
    """Record (group, resource, verb) of every request the client sends, as the API server's RBAC sees it."""
    send = api.rest_client.request

    def request(method, url, *args, **kwargs):
        m = _PATH.search(url)
        assert m, f"unexpected API path {url}"
        verb = _VERBS[method]
        if method == "GET" and m["name"] is None:
            verb = "list"
        calls.append((m["group"], m["resource"], verb))
        return send(method, url, *args, **kwargs)

    api.rest_client.request = request


def _decision(job_id: str, priority: int, **kw) -> Decision:
    return Decision(job_id=job_id, priority=Priority(priority), factors=(), action=kw.pop("action", "wait"),
                    tier="research", **kw)


@pytest.mark.timeout(120)
def test_every_call_of_a_sync_pass_is_allowed(kubectl):
    granted = _granted(kubectl)
    calls: list[tuple[str, str, str]] = []
    with kube_emulator() as (_, api):
        custom, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
        custom.create_namespaced_custom_object(GROUP, VERSION, "vision", "workloads",
                                               workload("vision", "job-a", priority=10), _preload_content=False)
        batch.create_namespaced_job("vision", batch_job("vision", "job-a"), _preload_content=False)
        custom.create_namespaced_custom_object(GROUP, VERSION, "nlp", "workloads",
                                               workload("nlp", "job-c", priority=5, admitted=True, gpus=8),
                                               _preload_content=False)
        _recording(api, calls)
        clock = [NOW]
        adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=1), clock=lambda: clock[0])
        assert len(adapter.pending_jobs()) == 1 and len(adapter.running_jobs()) == 1
        adapter.finished_jobs(0.0)  # the history the loop reads each pass
        plan = EvictionPlan("vision/job-a", (Victim("nlp/job-c", "nlp", 5, (("n1", 8),), 600.0, 1.3),), grace_s=30.0)
        start = _decision("vision/job-a", 40_000, action="start", flavor="A100-80GB", eviction=plan,
                          placement=Placement("A100-80GB", (("n1", 8),), "nvlink"))
        first = adapter.apply(start)
        assert first.ok, first.error
        assert [op.kind for op in first.done] == ["set_priority", "patch_job", "deactivate"]
        clock[0] = NOW + 31
        assert [op.kind for op in adapter.apply(start).done] == ["requeue"]
    used = set(calls)
    assert used <= granted, f"calls the ClusterRole does not allow: {sorted(used - granted)}"
    # every write the role grants is one the adapter makes (reads of queues and flavors are for the
    # operator's `kubectl auth can-i` checks and the rules layer's view of quotas)
    writes = {g for g in granted if g[2] not in ("get", "list", "watch")}
    assert writes <= used, f"granted but never used: {sorted(writes - used)}"
