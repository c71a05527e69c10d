"""The Kueue adapter: applies Decisions through the Kubernetes API with the official ``kubernetes``
client (``CustomObjectsApi`` for Kueue objects, ``BatchV1Api`` for batch/v1 Jobs).

=================  ==========================================================================
decision           what the adapter does (pending workloads only, where Kueue differs)
=================  ==========================================================================
priority           merge-patch ``Workload.spec.priority`` (int32, ``Decision.kueue_priority``);
                   Kueue orders and preempts by it and lets it change at any time
queue              (opt-in, ``move_queues``) ``Workload.spec.queueName`` and, for a batch/v1 Job
                   owner, its ``kueue.x-k8s.io/queue-name`` label (what Kueue reads from jobs)
flavor             the owner Job's pod template ``nodeSelector`` {flavor label: GPU type}, which
                   Kueue honours when it assigns a ResourceFlavor (suspended Jobs only)
constraint         (residency, docs/residency.md) the owner Job's pod template ``nodeSelector``
                   entries and required ``nodeAffinity`` ``In`` terms for the decision's
                   constraint (rule *constraint to node labels*, ``selectors``); only what is
                   missing is added, an existing required node affinity is kept
placement          ``kueue.x-k8s.io/podset-required-topology`` (one node or one rack) or
                   ``podset-preferred-topology`` (across racks) on the owner Job's pod template
reservation        nothing: Kueue has no advance reservation; the priority holds the place
eviction           per admitted victim: ``spec.active=false`` (Kueue evicts and suspends it; pods
                   get their termination grace period) with annotations recording when and for
                   whom; after the grace period ``spec.active=true`` requeues it (unless the plan
                   says not to requeue). The annotations make both steps idempotent.
=================  ==========================================================================

Creates use ``_preload_content=False`` (an API that answers a create with 200 and no body makes
the typed client return None). A missing object or an invalid patch (4xx) is permanent; a 409,
429, 5xx or a connection failure is transient and retried after re-reading.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import urllib3
from kubernetes import client

from predictor.adapters.base import AppliedAction, Operation, SchedulerRejected, SchedulerUnavailable
from predictor.adapters.cluster_policy import dns_name
from predictor.adapters.kueue.manifests import KueueNaming
from predictor.adapters.kueue.selectors import node_requirements
from predictor.adapters.kueue.workloads import (
    KueueWorkload,
    split_job_id,
    workload_from_object,
    workload_rows,
)
from predictor.adapters.retry import RetryExhausted, RetryPolicy
from predictor.policy.decision import Decision, EvictionPlan, Placement

__all__ = ["KueueAdapter", "QUEUE_LABEL", "REQUIRED_TOPOLOGY", "PREFERRED_TOPOLOGY", "topology_annotation"]

GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
EVICTED_FOR, EVICTED_AT, REQUEUED_AT = "predictor/evicted-for", "predictor/evicted-at", "predictor/requeued-at"
_PLURALS = {"Workload": "workloads", "WorkloadPriorityClass": "workloadpriorityclasses",
            "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
            "Topology": "topologies", "Cohort": "cohorts"}


def topology_annotation(placement: Placement, naming: KueueNaming) -> tuple[str, str]:
    """The TAS annotation for a placement: one node or one rack is required, across racks preferred."""
    if placement.placement_class in ("nvlink", "pcie_same_numa", "cross_numa"):
        return REQUIRED_TOPOLOGY, "kubernetes.io/hostname"
    if placement.placement_class == "cross_node_same_rack":
        return REQUIRED_TOPOLOGY, naming.rack_label
    return PREFERRED_TOPOLOGY, naming.block_label


def _classify(exc: Exception, what: str) -> Exception:
    if isinstance(exc, client.ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message") or exc.reason
        except (ValueError, AttributeError):
            message = exc.reason
        text = f"{what}: HTTP {exc.status} {message}"
        if exc.status in (0, 408, 409, 429) or (exc.status or 0) >= 500:
            return SchedulerUnavailable(text)
        return SchedulerRejected(text)
    return SchedulerUnavailable(f"{what}: {exc}")


class KueueAdapter:
    """Reads Workloads from and applies decisions to a Kubernetes cluster running Kueue."""

    target = "kueue"

    def __init__(self, api_client: client.ApiClient | None = None, naming: KueueNaming | None = None,
                 retry: RetryPolicy | None = None, clock: Callable[[], float] = time.time, move_queues: bool = False):
        if api_client is None:
            from kubernetes import config as kube_config

            configuration = client.Configuration()
            try:
                kube_config.load_incluster_config(client_configuration=configuration)
            except kube_config.ConfigException:
                # KUBECONFIG read now (the library reads it once, at import)
                kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"),
                                             client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        self.api = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.naming = naming or KueueNaming()
        self.retry = retry or RetryPolicy()
        self.clock = clock
        self.move_queues = move_queues  # moving workloads between LocalQueues is opt-in

    # -- raw calls -----------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _classify(exc, what) from None
        if kwargs.get("_preload_content") is False:
            return json.loads(result.data or b"{}")
        return result

    def _get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = (GROUP, self.naming.api_version)
        try:
            if namespace is None:
                return self.custom.get_cluster_custom_object(*args, _PLURALS[kind], name)
            return self.custom.get_namespaced_custom_object(*args, namespace, _PLURALS[kind], name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise _classify(exc, f"GET {kind} {name}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _classify(exc, f"GET {kind} {name}") from None

    def workloads(self) -> list[KueueWorkload]:
        """Every Workload in the cluster."""
        doc = self._call("LIST workloads", self.custom.list_cluster_custom_object, GROUP, self.naming.api_version,
                         "workloads")
        return [workload_from_object(o) for o in doc.get("items", [])]

    def pending_jobs(self) -> pd.DataFrame:
        items, _ = self.retry.call(self.workloads)
        return workload_rows([w for w in items if w.pending], now=self.clock())

    def running_jobs(self) -> pd.DataFrame:
        items, _ = self.retry.call(self.workloads)
        return workload_rows([w for w in items if w.running], now=self.clock())

    def finished_jobs(self, since_ts: float) -> pd.DataFrame:
        """Workloads that ended (``Finished``, or evicted for good) since ``since_ts``, as the Kueue
        reader reads them: the history the features and the fair-share ledger learn from."""
        items, _ = self.retry.call(self.workloads)
        rows = workload_rows([w for w in items if not w.pending and not w.running], now=self.clock())
        return rows.loc[rows["end_ts"].notna() & (rows["end_ts"] >= since_ts)].reset_index(drop=True)

    # -- planning ------------------------------------------------------------------------------

    def _patch_workload(self, w: KueueWorkload, kind: str, body: dict[str, Any], why: str,
                        not_before: float | None = None) -> Operation:
        return Operation(kind=kind, job_id=w.job_id, description=why, not_before_ts=not_before,
                         api={"verb": "patch", "resource": f"workloads.{GROUP}", "namespace": w.namespace,
                              "name": w.name, "body": body})

    def plan(self, decision: Decision, now: float | None = None) -> list[Operation]:
        """Operations that would bring Kueue in line with ``decision`` (deferred ones included)."""
        now = self.clock() if now is None else now
        namespace, name = split_job_id(decision.job_id)
        obj = self._get("Workload", name, namespace)
        if obj is None:
            raise SchedulerRejected(f"workload {decision.job_id} not found (finished and deleted, or never created)")
        w = workload_from_object(obj)
        ops: list[Operation] = []
        if w.pending:
            want = decision.kueue_priority
            if w.priority != want:
                ops.append(self._patch_workload(w, "set_priority", {"spec": {"priority": want}},
                                                f"priority {w.priority} -> {want}"))
            queue = dns_name(decision.queue) if decision.queue and self.move_queues else None
            if queue and w.queue_name != queue:
                ops.append(self._patch_workload(w, "set_queue", {"spec": {"queueName": queue}},
                                                f"LocalQueue {w.queue_name} -> {queue}"))
            ops += self._job_ops(decision, w, queue)
        if decision.eviction is not None:
            ops += self._eviction_ops(decision.eviction, now)
        return ops

    def _job_ops(self, d: Decision, w: KueueWorkload, queue: str | None) -> list[Operation]:
        """Label and pod-template changes on a suspended batch/v1 Job that owns the workload."""
        if w.owner_kind != "Job" or w.owner_api_version != "batch/v1" or not w.owner_name:
            return []
        wants_template = bool(d.flavor) or (d.action == "start" and d.placement is not None) or bool(d.constraint)
        if not (queue or wants_template):
            return []
        try:
            job = self._call(f"GET Job {w.namespace}/{w.owner_name}", self.batch.read_namespaced_job,
                             w.owner_name, w.namespace, _preload_content=False)
        except SchedulerRejected as exc:
            if "HTTP 404" in str(exc):
                return []  # the Job is gone (its workload will follow): nothing to patch
            raise
        meta, spec = job.get("metadata") or {}, job.get("spec") or {}
        template = spec.get("template") or {}
        body: dict[str, Any] = {}
        reasons = []
        if queue and (meta.get("labels") or {}).get(QUEUE_LABEL) != queue:
            body["metadata"] = {"labels": {QUEUE_LABEL: queue}}
            reasons.append(f"label {QUEUE_LABEL}={queue}")
        if wants_template and spec.get("suspend"):
            tpl: dict[str, Any] = {}
            current_selector = (template.get("spec") or {}).get("nodeSelector") or {}
            if d.flavor and current_selector.get(self.naming.flavor_label) != d.flavor:
                tpl["spec"] = {"nodeSelector": {self.naming.flavor_label: d.flavor}}
                reasons.append(f"flavor {d.flavor}")
            if d.constraint:  # residency: the scheduler enforces where the job may run
                reasons += self._constraint_patch(d.constraint, template, tpl)
            if d.action == "start" and d.placement is not None:
                key, level = topology_annotation(d.placement, self.naming)
                current = (template.get("metadata") or {}).get("annotations") or {}
                if current.get(key) != level:
                    other = PREFERRED_TOPOLOGY if key == REQUIRED_TOPOLOGY else REQUIRED_TOPOLOGY
                    annotations: dict[str, Any] = {key: level}
                    if other in current:
                        annotations[other] = None  # merge patch: null deletes the other annotation
                    tpl["metadata"] = {"annotations": annotations}
                    reasons.append(f"{key.rsplit('/', 1)[1]}={level} ({d.placement.placement_class})")
            if tpl:
                body["spec"] = {"template": tpl}
        if not body:
            return []
        return [Operation(kind="patch_job", job_id=w.job_id, description="; ".join(reasons),
                          api={"verb": "patch", "resource": "jobs.batch", "namespace": w.namespace,
                               "name": w.owner_name, "body": body})]

    def _constraint_patch(self, constraint: str, template: dict[str, Any], tpl: dict[str, Any]) -> list[str]:
        """Add to ``tpl`` (a pod-template merge patch) what the constraint needs and the template lacks."""
        selector, expressions, skipped = node_requirements(constraint, self.naming)
        spec = template.get("spec") or {}
        current = spec.get("nodeSelector") or {}
        missing = {k: v for k, v in selector.items() if current.get(k) != v}
        reasons = []
        if missing:
            tpl.setdefault("spec", {}).setdefault("nodeSelector", {}).update(missing)
            reasons.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in sorted(missing.items())))
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if expressions and not required:
            tpl.setdefault("spec", {})["affinity"] = {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": expressions}]}}}
            reasons.append("node affinity " + ";".join(f"{e['key']} in {'|'.join(e['values'])}" for e in expressions))
        elif expressions:
            reasons.append("kept the job's own required node affinity")
        if skipped:
            reasons.append(f"no Kubernetes form for {';'.join(skipped)}")
        return reasons

    def _eviction_ops(self, plan: EvictionPlan, now: float) -> list[Operation]:
        ops: list[Operation] = []
        for victim in plan.victims:
            namespace, name = split_job_id(victim.job_id)
            obj = self._get("Workload", name, namespace)
            if obj is None:
                continue
            v = workload_from_object(obj)
            marked = v.annotations.get(EVICTED_AT)
            if marked is None:
                if not v.running or not v.active:
                    continue
                at = int(now)
                ops.append(self._patch_workload(
                    v, "deactivate", {"metadata": {"annotations": {EVICTED_FOR: plan.for_job_id, EVICTED_AT: str(at)}},
                                      "spec": {"active": False}},
                    f"evict {v.job_id} for {plan.for_job_id} (loses ~{victim.work_lost_s:.0f} s of work)"))
            else:
                at = int(marked)
                if v.annotations.get(REQUEUED_AT) is not None or v.active:
                    continue
            if plan.requeue:
                ops.append(self._patch_workload(
                    v, "requeue", {"metadata": {"annotations": {REQUEUED_AT: str(int(at + plan.grace_s))}},
                                   "spec": {"active": True}},
                    f"requeue {v.job_id} after {plan.grace_s:.0f} s", not_before=at + plan.grace_s))
        return ops

    # -- acting --------------------------------------------------------------------------------

    def execute(self, op: Operation) -> None:
        """Perform one planned API call."""
        api = op.api or {}
        what = f"{api.get('verb', '?').upper()} {api.get('resource')} {api.get('namespace', '')}/{api.get('name', '')}"
        if api.get("resource") == "jobs.batch":
            self._call(what, self.batch.patch_namespaced_job, api["name"], api["namespace"], api["body"],
                       _content_type="application/merge-patch+json", _preload_content=False)
            return
        kind = api["kind"] if "kind" in api else "Workload"
        plural, version = _PLURALS[kind], self.naming.api_version
        ns = api.get("namespace")
        if api["verb"] == "create":
            fn = self.custom.create_namespaced_custom_object if ns else self.custom.create_cluster_custom_object
            args = (GROUP, version, ns, plural, api["body"]) if ns else (GROUP, version, plural, api["body"])
            self._call(what, fn, *args, _preload_content=False)
        else:
            fn = self.custom.patch_namespaced_custom_object if ns else self.custom.patch_cluster_custom_object
            args = (GROUP, version, ns, plural, api["name"], api["body"]) if ns else (
                GROUP, version, plural, api["name"], api["body"])
            self._call(what, fn, *args, _preload_content=False)

    def _run(self, job_id: str, plan: Callable[[], list[Operation]], now: float, dry_run: bool) -> AppliedAction:
        executed: list[Operation] = []

        def attempt() -> list[Operation]:
            ops = plan()
            for op in ops:
                if op.due(now) and not dry_run:
                    self.execute(op)
                    executed.append(op)
            return ops

        try:
            ops, attempts = self.retry.call(attempt)
        except RetryExhausted as exc:
            return AppliedAction(self.target, job_id, done=tuple(executed), dry_run=dry_run, error=str(exc),
                                 retryable=True, attempts=exc.attempts)
        except SchedulerRejected as exc:
            return AppliedAction(self.target, job_id, done=tuple(executed), dry_run=dry_run, error=str(exc))
        due = tuple(op for op in ops if op.due(now))
        return AppliedAction(self.target, job_id, done=due if dry_run else tuple(executed),
                             deferred=tuple(op for op in ops if not op.due(now)), dry_run=dry_run, attempts=attempts)

    def apply(self, decision: Decision, now: float | None = None, dry_run: bool = False) -> AppliedAction:
        """Apply one decision: plan against the current objects, execute what is due."""
        now = self.clock() if now is None else now
        return self._run(decision.job_id, lambda: self.plan(decision, now), now, dry_run)

    def apply_many(self, decisions: Sequence[Decision], now: float | None = None,
                   dry_run: bool = False) -> list[AppliedAction]:
        return [self.apply(d, now=now, dry_run=dry_run) for d in decisions]

    # -- configuration objects -----------------------------------------------------------------

    def plan_objects(self, objs: Sequence[dict[str, Any]]) -> list[Operation]:
        """Create what is missing, merge-patch what differs (labels, spec, value, description)."""
        ops = []
        for obj in objs:
            kind, meta = obj["kind"], obj["metadata"]
            current = self._get(kind, meta["name"], meta.get("namespace"))
            api = {"kind": kind, "resource": f"{_PLURALS[kind]}.{GROUP}", "name": meta["name"]}
            if meta.get("namespace"):
                api["namespace"] = meta["namespace"]
            if current is None:
                ops.append(Operation(kind="create", job_id="", description=f"create {kind} {meta['name']}",
                                     api={**api, "verb": "create", "body": obj}))
                continue
            body = {k: v for k, v in obj.items() if k in ("spec", "value", "description") and current.get(k) != v}
            labels = meta.get("labels") or {}
            if any((current.get("metadata") or {}).get("labels", {}).get(k) != v for k, v in labels.items()):
                body["metadata"] = {"labels": labels}
            if body:
                ops.append(Operation(kind="update", job_id="", description=f"update {kind} {meta['name']}: "
                                     f"{', '.join(sorted(body))}", api={**api, "verb": "patch", "body": body}))
        return ops

    def ensure_objects(self, objs: Sequence[dict[str, Any]], dry_run: bool = False) -> AppliedAction:
        """Bring the cluster's Kueue configuration in line with ``objs`` (idempotent)."""
        return self._run("(configuration)", lambda: self.plan_objects(objs), self.clock(), dry_run)
