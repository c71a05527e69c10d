"""Builders for the Kueue objects the adapter tests start from (as a real cluster would hold them)."""

from __future__ import annotations

from typing import Any

API = "kueue.x-k8s.io/v1beta2"


def workload(namespace: str, name: str, *, priority: int = 0, queue: str = "gpus", gpus: int = 2, pods: int = 1,
             admitted: bool = False, active: bool = True, job: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": API, "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-29T10:00:00Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job or name,
                                          "uid": f"uid-{name}", "controller": True}]},
        "spec": {"priority": priority, "queueName": queue, "active": active,
                 "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": [
                     {"name": "train", "image": "trainer:1",
                      "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}}}]}}}]},
    }
    if admitted:
        obj["status"] = {
            "admission": {"clusterQueue": namespace, "podSetAssignments": [
                {"name": "main", "count": pods, "flavors": {"nvidia.com/gpu": "a100-80gb"},
                 "resourceUsage": {"nvidia.com/gpu": str(gpus * pods)}}]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                            "lastTransitionTime": "2026-11-29T10:05:00Z"},
                           {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                            "lastTransitionTime": "2026-11-29T10:05:00Z"}]}
    return obj


def batch_job(namespace: str, name: str, *, queue: str = "gpus", suspend: bool = True) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"suspend": suspend, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "train", "image": "trainer:1"}]}}}}
