"""``predictor kueue``: Kueue configuration from the policy file and the inventory.

``manifests`` writes YAML for GitOps (WorkloadPriorityClasses, Topology, ResourceFlavors,
ClusterQueues, LocalQueues, a kustomization and the node-labelling commands); ``apply`` creates or
updates the same objects through the Kubernetes API (kubeconfig or in-cluster credentials).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from features.errors import InputError
from predictor.adapters.cluster_policy import load_cluster_policy
from predictor.adapters.kueue.crd_validation import CrdSchemas
from predictor.adapters.kueue.manifests import KueueNaming, all_manifests, host_resources, node_label_commands
from predictor.capacity.inventory_sources import load_inventory

ORDER = 75

_FILES = (("WorkloadPriorityClass", "00-workloadpriorityclasses.yaml"), ("Topology", "10-topology.yaml"),
          ("ResourceFlavor", "20-resourceflavors.yaml"), ("ClusterQueue", "30-clusterqueues.yaml"),
          ("LocalQueue", "40-localqueues.yaml"))

PolicyOpt = Annotated[Path | None, typer.Option("--policy", help="Policy file with tiers and teams (default: shipped).")]
InventoryOpt = Annotated[str, typer.Option("--inventory", show_default=False, help=(
    "The cluster's inventory (path from here): YAML file (`predictor inventory` writes one), public "
    "inventory file, or a GPU count."))]
#: The shipped example cluster: fine to try the generators on, refused by ``apply`` unless asked.
EXAMPLE_INVENTORY = Path(__file__).resolve().parents[2] / "data" / "inventory" / "example-cluster.yaml"
ApiVersionOpt = Annotated[str, typer.Option("--api-version", help="Kueue API version: v1beta2 (Kueue >= 0.15) or v1beta1.")]
CohortOpt = Annotated[str, typer.Option("--cohort", help="Cohort all team ClusterQueues share.")]
FlavorLabelOpt = Annotated[str, typer.Option("--flavor-label", help="Node label selecting a GPU type's nodes.")]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def is_example_inventory(spec: str) -> bool:
    """Whether ``spec`` is the shipped example inventory (the file, or a copy with the same contents)."""
    path = Path(spec)
    if not path.is_file() or not EXAMPLE_INVENTORY.is_file():
        return False
    if path.resolve() == EXAMPLE_INVENTORY:
        return True
    try:
        return yaml.safe_load(path.read_text()) == yaml.safe_load(EXAMPLE_INVENTORY.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return False


def _build(policy: Path | None, inventory: str, api_version: str, cohort: str,
           flavor_label: str) -> tuple[list[dict[str, Any]], KueueNaming, Any]:
    naming = KueueNaming(api_version=api_version, cohort=cohort, flavor_label=flavor_label)
    inv = load_inventory(inventory)
    return all_manifests(load_cluster_policy(policy), inv, naming), naming, inv


def write_manifests(objs: list[dict[str, Any]], label_cmds: list[list[str]], out: Path) -> list[Path]:
    """One multi-document YAML file per kind, a kustomization.yaml, and label-nodes.sh, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, name in _FILES:
        docs = [o for o in objs if o["kind"] == kind]
        if docs:
            _write_atomic(out / name, yaml.safe_dump_all(docs, sort_keys=False))
            written.append(out / name)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [p.name for p in written]}
    _write_atomic(out / "kustomization.yaml", yaml.safe_dump(kustomization, sort_keys=False))
    script = out / "label-nodes.sh"
    _write_atomic(script, "#!/bin/sh\n# Labels the ResourceFlavors and the Topology select nodes by.\nset -e\n"
                  + "".join(shlex.join(c) + "\n" for c in label_cmds))
    script.chmod(0o755)
    return [*written, out / "kustomization.yaml", script]


def register(app: typer.Typer) -> None:
    kueue = typer.Typer(help="Kueue configuration mirroring the policy file and the inventory.", no_args_is_help=True)
    app.add_typer(kueue, name="kueue")

    @kueue.command("manifests")
    def manifests_cmd(
        out: Annotated[Path, typer.Option("--out", help="Folder to write the YAML files into.")],
        inventory: InventoryOpt,
        policy: PolicyOpt = None,
        api_version: ApiVersionOpt = "v1beta2",
        cohort: CohortOpt = "gpu-cluster",
        flavor_label: FlavorLabelOpt = "predictor/gpu-type",
        crds: Annotated[Path | None, typer.Option("--crds", help="Folder of Kueue CRD YAMLs to validate against.")] = None,
    ) -> None:
        """Write WorkloadPriorityClasses, Topology, ResourceFlavors, ClusterQueues and LocalQueues as YAML.

        Example: predictor kueue manifests --inventory data/inventory/example-cluster.yaml --policy policy.yaml --out kueue/
        """
        objs, naming, inv = _build(policy, inventory, api_version, cohort, flavor_label)
        if crds is not None:
            schemas = CrdSchemas.from_folder(crds)
            bad = [f"{o['kind']} {o['metadata']['name']}: {'; '.join(p)}" for o in objs if (p := schemas.problems(o))]
            if bad:
                raise InputError("generated objects do not match the CRDs: " + " | ".join(bad))
            typer.echo(f"validated {len(objs)} objects against the CRDs in {crds}")
        paths = write_manifests(objs, node_label_commands(inv, naming), out)
        for p in paths:
            typer.echo(f"wrote {p}")
        if host_resources(inv) is None:
            typer.echo("note: the inventory lacks cpus/mem_mib for some GPU nodes, so ClusterQueues cover only "
                       "nvidia.com/gpu; set resources.excludeResourcePrefixes in Kueue's configuration or add them.",
                       err=True)

    @kueue.command("apply")
    def apply_cmd(
        inventory: InventoryOpt,
        policy: PolicyOpt = None,
        api_version: ApiVersionOpt = "v1beta2",
        cohort: CohortOpt = "gpu-cluster",
        flavor_label: FlavorLabelOpt = "predictor/gpu-type",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the API calls instead of making them.")] = False,
        allow_example: Annotated[bool, typer.Option("--allow-example-inventory", help=(
            "Apply even though --inventory is the shipped example cluster (a test cluster only)."))] = False,
    ) -> None:
        """Create or update the same objects through the Kubernetes API (idempotent).

        Example: predictor kueue apply --inventory data/inventory/example-cluster.yaml --policy policy.yaml --dry-run
        """
        from predictor.adapters.kueue.adapter import KueueAdapter

        if is_example_inventory(inventory) and not allow_example:
            raise InputError(f"--inventory {inventory} is the shipped example cluster, not yours: write yours with "
                             "`predictor inventory --from-kubernetes --out inventory.yaml` (or pass "
                             "--allow-example-inventory on a test cluster)")
        objs, naming, _ = _build(policy, inventory, api_version, cohort, flavor_label)
        result = KueueAdapter(naming=naming).ensure_objects(objs, dry_run=dry_run)
        for op in result.done:
            typer.echo(("would " if dry_run else "") + f"{op.description}: {op.render()[:200]}")
        if not result.ok:
            typer.echo(f"error: {result.error}", err=True)
            raise typer.Exit(1)
        if not result.done:
            typer.echo("Kueue configuration already up to date")
