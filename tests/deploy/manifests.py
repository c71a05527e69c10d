"""Render the Kustomize overlays and check what they produce: the real OpenAPI schemas of a current
Kubernetes release (``kubernetes-validate``), the Kueue CRDs, and what the schemas cannot say.

``kubectl kustomize`` is the one on PATH: Debian's ``kubernetes-client`` (kubectl 1.20, kustomize
v2.0.3) in CI on a fresh machine, or a newer kubectl where one is installed; the manifests are
written for both.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import typer
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from predictor.adapters.kueue.crd_validation import CrdSchemas

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
OVERLAYS = tuple(sorted(p.name for p in (KUSTOMIZE / "overlays").iterdir() if (p / "kustomization.yaml").is_file()))
KUEUE_GROUP = "kueue.x-k8s.io"
#: Kubernetes release whose schemas the objects are checked against (the newest the package ships).
KUBERNETES_VERSION = latest_version()
_VOLUME_SOURCES = {"emptyDir", "configMap", "secret", "persistentVolumeClaim", "hostPath", "projected",
                   "downwardAPI", "csi", "ephemeral", "nfs"}


def render(folder: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize folder`` prints (raises with kubectl's message on failure)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not on PATH"
    done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {folder} failed: {done.stderr.strip()}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '-')}/{meta.get('name')}"


def schema_problems(obj: dict[str, Any], crds: CrdSchemas | None) -> list[str]:
    """What the API server's schema check would refuse: Kubernetes kinds against the OpenAPI schemas of
    :data:`KUBERNETES_VERSION` (strict: unknown fields are errors), Kueue kinds against the CRDs."""
    if str(obj.get("apiVersion", "")).startswith(KUEUE_GROUP + "/"):
        assert crds is not None, f"{name_of(obj)}: Kueue object but no CRDs loaded"
        return crds.problems(obj)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except SchemaNotFoundError as exc:
        return [exc.message]
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "(object)"
        return [f"{where}: {exc.message}"]
    return []


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec(s) inside a workload object (Deployment, CronJob, Job, ...)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if "template" in spec:
        return [spec["template"]["spec"]]
    return []


def reference_problems(objs: Iterable[dict[str, Any]]) -> list[str]:
    """What schemas cannot check: references inside the rendered set, one source per volume, mounts
    of declared volumes, selectors that match their pods."""
    objs = list(objs)
    have = {(o["kind"], (o.get("metadata") or {}).get("name")) for o in objs}
    external_secrets = set()
    out: list[str] = []

    def need(kind: str, name: str, who: str) -> None:
        if kind == "Secret":
            external_secrets.add(name)  # created out of band (docs/deployment.md): never rendered
        elif (kind, name) not in have:
            out.append(f"{who}: {kind} {name} is not in the rendered objects")

    for obj in objs:
        who = name_of(obj)
        for pod in pod_specs(obj):
            if pod.get("serviceAccountName"):
                need("ServiceAccount", pod["serviceAccountName"], who)
            volumes = {v["name"]: v for v in pod.get("volumes") or []}
            for v in volumes.values():
                sources = _VOLUME_SOURCES & set(v)
                if len(sources) != 1:
                    out.append(f"{who}: volume {v['name']} has {len(sources)} sources ({sorted(sources)})")
                if "configMap" in v:
                    need("ConfigMap", v["configMap"]["name"], who)
                if "persistentVolumeClaim" in v:
                    need("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], who)
                if "secret" in v:
                    need("Secret", v["secret"]["secretName"], who)
            for c in pod.get("containers") or []:
                for m in c.get("volumeMounts") or []:
                    if m["name"] not in volumes:
                        out.append(f"{who}: container {c['name']} mounts undeclared volume {m['name']}")
                for src in c.get("envFrom") or []:
                    if "configMapRef" in src:
                        need("ConfigMap", src["configMapRef"]["name"], who)
                for e in c.get("env") or []:
                    ref = (e.get("valueFrom") or {})
                    if "configMapKeyRef" in ref:
                        need("ConfigMap", ref["configMapKeyRef"]["name"], who)
                    if "secretKeyRef" in ref:
                        need("Secret", ref["secretKeyRef"]["name"], who)
        if obj["kind"] in ("Service", "PodDisruptionBudget", "Deployment"):
            selector = obj["spec"]["selector"]
            selector = selector.get("matchLabels", {}) if obj["kind"] != "Service" else selector
            pods = [o["spec"]["template"]["metadata"]["labels"] for o in objs if o["kind"] == "Deployment"]
            if not any(selector.items() <= labels.items() for labels in pods):
                out.append(f"{who}: selector {selector} matches no pod template")
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            need(obj["roleRef"]["kind"], obj["roleRef"]["name"], who)
            for s in obj.get("subjects") or []:
                if s["kind"] == "ServiceAccount":
                    need("ServiceAccount", s["name"], who)
    return out


def containers(objs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every container of every workload, keyed ``<object name>/<container name>``."""
    return {f"{o['metadata']['name']}/{c['name']}": c for o in objs for pod in pod_specs(o) for c in pod["containers"]}


def command_problem(argv: list[str]) -> str | None:
    """Why ``argv`` (``predictor ...``) would not parse as a command of the CLI, or None when it does.

    Parses with the CLI's own click objects (options, types, choices) without running anything.
    """
    from predictor.cli import app

    if not argv or Path(argv[0]).name != "predictor":
        return f"not a predictor command: {shlex.join(argv)}"
    command: Any = typer.main.get_command(app)  # typer's own (vendored) click objects
    name, args = "predictor", list(argv[1:])
    while hasattr(command, "commands"):
        if not args or args[0] not in command.commands:
            return f"{shlex.join(argv)}: no such command {args[0] if args else ''!r} under {name!r}"
        name, command, args = args[0], command.commands[args[0]], args[1:]
    try:
        command.make_context(name, args)
    except Exception as exc:  # click's UsageError family (typer vendors click, so match by shape)
        if not hasattr(exc, "format_message"):
            raise
        return f"{shlex.join(argv)}: {exc.format_message()}"
    return None
