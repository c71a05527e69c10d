"""Inventory loaders: a YAML file, and the public inventories (openb node list, PAI machine spec,
Crux host-to-switch topology), plus ``load_inventory`` which picks the right one.

What each public source says, and what it does not:

* **openb** (``openb_node_list_*.csv``: ``sn,cpu_milli,memory_mib,gpu,model``): GPU type and count per
  node. No NVLink, NUMA or rack information, so placements there never claim better than
  ``cross_numa`` inside a node or ``cross_rack`` across nodes. ``V100M16`` is a 16 GiB V100.
* **PAI** (``pai_machine_spec.csv`` without header; columns in ``pai_machine_spec.header``:
  ``machine,gpu_type,cap_cpu,cap_mem,cap_gpu``): same. Machines typed ``CPU`` hold no GPU.
  ``MISC`` (other GPU models) has no published memory size: it gets the smallest memory of the
  other types in the file, so sizing never promises memory a MISC GPU may lack.
* **Crux** (``crux_topo.csv``: ``ip,DSW,PSW,ASW``): which ToR (``ASW``, the rack) and aggregation
  switch (``PSW``, the block) each host hangs off; no GPU information, so GPU type and count per
  host are arguments (DGX-style by default: one NVLink island, two NUMA domains).

Every loader raises ``InputError`` naming the file, the row and the problem.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from features.errors import InputError
from features.gpu_types import DEFAULT_VOCABULARY, GpuTypeVocabulary
from features.yaml_files import read_yaml_mapping
from predictor.capacity.inventory import KNOWN_GPU_TYPES, GpuType, Inventory, Node, homogeneous_inventory

__all__ = ["load_inventory", "inventory_from_yaml", "inventory_from_mapping", "inventory_from_openb",
           "inventory_from_pai", "inventory_from_crux"]

def _gpu_type(name: str, overrides: Mapping[str, GpuType]) -> GpuType | None:
    """The type ``name`` means: one given in the file, else a known one under any of its spellings."""
    if name in overrides:
        return overrides[name]
    canonical = DEFAULT_VOCABULARY.canonical_or_none(name)
    return KNOWN_GPU_TYPES[canonical] if canonical is not None else None


def _dgx_topology(n: int) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    half = max(n // 2, 1)
    return (tuple(range(n)),), tuple(0 if g < half else 1 for g in range(n))


# ---------------------------------------------------------------------------------------- YAML
class _GpuTypeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory_mib: int = Field(gt=0)
    cost_per_hour: float = Field(1.0, gt=0)
    aliases: list[str] = Field(default_factory=list, description=(
        "other spellings of this type in job logs and node labels (sacct gres types, "
        "nvidia.com/gpu.product values); normalised spellings match without being listed"))


class _NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="node name; with count, a pattern with {i}, e.g. dgx-{i:02d}")
    count: int = Field(1, ge=1, description="how many identical nodes this entry stands for")
    gpu_type: str | None = None
    gpus: int = Field(0, ge=0)
    nvlink_islands: list[list[int]] | str = Field("none", description="list of GPU index lists, 'all' or 'none'")
    numa_of_gpu: list[int] | None = None
    rack: str | None = Field(None, description="ToR switch; with count, may use {i}")
    block: str | None = None
    cpus: int | None = Field(None, ge=0)
    mem_mib: int | None = Field(None, ge=0)
    # residency attributes (docs/residency.md)
    region: str | None = Field(None, min_length=1, description="region the node is in, e.g. eu-west")
    site: str | None = Field(None, min_length=1, description="site / data centre, e.g. fra1")
    pool: str | None = Field(None, min_length=1, description="node pool (Kubernetes node group)")
    partitions: list[str] = Field(default_factory=list, description="Slurm partitions the node is in")
    features: list[str] = Field(default_factory=list, description="tags: Slurm node features, true-valued labels")
    labels: dict[str, str] = Field(default_factory=dict, description="other node labels (name: value)")

    @field_validator("nvlink_islands")
    @classmethod
    def _islands(cls, v: list[list[int]] | str) -> list[list[int]] | str:
        if isinstance(v, str) and v not in ("all", "none"):
            raise ValueError("must be a list of GPU index lists, 'all' or 'none'")
        return v


class _InventorySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_types: dict[str, _GpuTypeSpec] = Field(default_factory=dict)
    nodes: list[_NodeSpec] = Field(min_length=1)


def inventory_from_mapping(data: Mapping[str, Any], origin: str = "inventory") -> Inventory:
    """Build an inventory from the YAML form (see ``data/inventory/example-cluster.yaml``)."""
    try:
        spec = _InventorySpec.model_validate(dict(data))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{origin}: {problems}") from None
    types = {name: GpuType(name, t.memory_mib, t.cost_per_hour) for name, t in spec.gpu_types.items()}
    aliases = {alias: name for name, t in spec.gpu_types.items() for alias in t.aliases}
    nodes: list[Node] = []
    for k, entry in enumerate(spec.nodes):
        where = f"{origin}: nodes.{k} ({entry.name})"
        if entry.gpus and not entry.gpu_type:
            raise InputError(f"{where}: has {entry.gpus} GPUs but no gpu_type")
        if entry.gpu_type and entry.gpu_type not in types:
            listed = GpuTypeVocabulary(types, aliases).canonical_or_none(entry.gpu_type) if types else None
            known = _gpu_type(entry.gpu_type, {})
            if listed is not None:
                entry = entry.model_copy(update={"gpu_type": listed})
            elif known is None:
                raise InputError(f"{where}: GPU type {entry.gpu_type!r} has no memory size; add it under gpu_types "
                                 f"(known types: {', '.join(DEFAULT_VOCABULARY.known())})")
            else:
                entry = entry.model_copy(update={"gpu_type": known.name})
                types[known.name] = known
        if entry.nvlink_islands == "all":
            islands: tuple[tuple[int, ...], ...] = (tuple(range(entry.gpus)),) if entry.gpus else ()
        elif entry.nvlink_islands == "none":
            islands = ()
        else:
            islands = tuple(tuple(i) for i in entry.nvlink_islands)  # type: ignore[union-attr]
            bad = [g for isl in islands for g in isl if not 0 <= g < entry.gpus]
            if bad:
                raise InputError(f"{where}: nvlink_islands names GPU {bad[0]}, the node has {entry.gpus}")
        numa = tuple(entry.numa_of_gpu or ())
        if numa and len(numa) != entry.gpus:
            raise InputError(f"{where}: numa_of_gpu has {len(numa)} entries for {entry.gpus} GPUs")
        for i in range(entry.count):
            try:
                name = entry.name.format(i=i) if entry.count > 1 else entry.name
                rack = entry.rack.format(i=i) if entry.rack else None
            except (KeyError, IndexError, ValueError) as exc:
                raise InputError(f"{where}: bad name pattern ({exc})") from None
            if entry.count > 1 and name == entry.name:
                raise InputError(f"{where}: count {entry.count} needs a name pattern with {{i}}")
            nodes.append(Node(name=name, gpu_type=entry.gpu_type if entry.gpus else None, num_gpus=entry.gpus,
                              nvlink_islands=islands, numa_of_gpu=numa, rack=rack, block=entry.block,
                              cpus=entry.cpus, mem_mib=entry.mem_mib, region=entry.region, site=entry.site,
                              pool=entry.pool, partitions=tuple(entry.partitions), features=tuple(entry.features),
                              labels=tuple(sorted(entry.labels.items()))))
    try:
        return Inventory(nodes=tuple(nodes), gpu_types=types, aliases=aliases)
    except ValueError as exc:
        raise InputError(f"{origin}: {exc}") from None


def inventory_from_yaml(path: str | Path) -> Inventory:
    """An inventory from a YAML file (InputError with the line for bad YAML)."""
    data = read_yaml_mapping(path, "inventory file")
    return inventory_from_mapping(data, origin=f"inventory file {path}")


# ---------------------------------------------------------------------------------------- CSV
def _rows(path: Path, fieldnames: list[str] | None = None) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh, fieldnames=fieldnames)
            start = 1 if fieldnames else 2
            return [(start + k, row) for k, row in enumerate(reader)]
    except FileNotFoundError:
        raise InputError(f"inventory file {path} does not exist") from None


def _int(path: Path, line: int, row: Mapping[str, str], key: str) -> int:
    raw = (row.get(key) or "").strip()
    try:
        return int(float(raw))
    except ValueError:
        raise InputError(f"{path} line {line}: column {key!r} is not a number ({raw!r})") from None


def inventory_from_openb(path: str | Path, *, include_cpu_nodes: bool = False) -> Inventory:
    """Nodes of an openb node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    path = Path(path)
    nodes = []
    types: dict[str, GpuType] = {}
    for line, row in _rows(path):
        missing = [c for c in ("sn", "gpu", "model") if c not in row]
        if missing:
            raise InputError(f"{path}: not an openb node list (no column {missing[0]!r})")
        gpus = _int(path, line, row, "gpu")
        model = (row.get("model") or "").strip()
        if gpus > 0 and not model:
            raise InputError(f"{path} line {line}: node {row['sn']} has {gpus} GPUs but no model")
        if gpus == 0 and not include_cpu_nodes:
            continue
        if gpus:
            t = _gpu_type(model, types)
            if t is None:
                raise InputError(f"{path} line {line}: GPU model {model!r} has no known memory size")
            types[model] = t
        nodes.append(Node(name=row["sn"].strip(), gpu_type=model or None, num_gpus=gpus,
                          cpus=_int(path, line, row, "cpu_milli") // 1000, mem_mib=_int(path, line, row, "memory_mib")))
    if not nodes:
        raise InputError(f"{path}: no node with GPUs")
    return Inventory(nodes=tuple(nodes), gpu_types=types)


def inventory_from_pai(path: str | Path, header: str | Path | None = None, *,
                       misc_memory_mib: int | None = None) -> Inventory:
    """Machines of the PAI machine spec (columns from the ``.header`` file beside it)."""
    path = Path(path)
    header_path = Path(header) if header is not None else path.with_suffix(".header")
    try:
        names = header_path.read_text().strip().split(",")
    except FileNotFoundError:
        raise InputError(f"PAI machine spec {path}: header file {header_path} does not exist") from None
    need = {"machine", "gpu_type", "cap_gpu"}
    if not need <= set(names):
        raise InputError(f"{header_path}: expected columns {sorted(need)}, got {names}")
    rows = _rows(path, names)
    known = sorted({r["gpu_type"] for _, r in rows} - {"CPU", "MISC"})
    types: dict[str, GpuType] = {}
    for name in known:
        t = _gpu_type(name, {})
        if t is None:
            raise InputError(f"{path}: GPU type {name!r} has no known memory size")
        types[name] = t
    if misc_memory_mib is None:
        misc_memory_mib = min((t.memory_mib for t in types.values()), default=16_384)
    types["MISC"] = GpuType("MISC", int(misc_memory_mib), 0.5)
    nodes = []
    for line, row in rows:
        gpus = _int(path, line, row, "cap_gpu")
        gtype = row["gpu_type"].strip()
        if gpus == 0 or gtype == "CPU":
            continue
        cpus = _int(path, line, row, "cap_cpu") if "cap_cpu" in row else None
        mem = _int(path, line, row, "cap_mem") * 1024 if "cap_mem" in row else None  # GiB -> MiB
        nodes.append(Node(name=row["machine"].strip(), gpu_type=gtype, num_gpus=gpus, cpus=cpus, mem_mib=mem))
    if not nodes:
        raise InputError(f"{path}: no machine with GPUs")
    return Inventory(nodes=tuple(nodes), gpu_types=types)


def inventory_from_crux(path: str | Path, *, gpus_per_host: int = 8, gpu_type: str = "A100-80GB",
                        nvlink: bool = True) -> Inventory:
    """Hosts of the Crux topology (``ip,DSW,PSW,ASW``): rack = ASW (ToR), block = PSW (aggregation)."""
    path = Path(path)
    if gpus_per_host < 1:
        raise InputError(f"gpus_per_host must be at least 1, got {gpus_per_host}")
    if _gpu_type(gpu_type, {}) is None:
        raise InputError(f"GPU type {gpu_type!r} has no known memory size")
    islands, numa = _dgx_topology(gpus_per_host) if nvlink else ((), ())
    nodes = []
    for line, row in _rows(path):
        if not {"ip", "ASW", "PSW"} <= set(row):
            raise InputError(f"{path}: not a Crux topology file (needs columns ip, ASW, PSW)")
        host, asw, psw = (row["ip"] or "").strip(), (row["ASW"] or "").strip(), (row["PSW"] or "").strip()
        if not host or not asw:
            raise InputError(f"{path} line {line}: host or ASW switch missing")
        nodes.append(Node(name=host, gpu_type=gpu_type, num_gpus=gpus_per_host, nvlink_islands=islands,
                          numa_of_gpu=numa, rack=f"{psw}/{asw}", block=psw or None))
    if not nodes:
        raise InputError(f"{path}: no host")
    try:
        return Inventory(nodes=tuple(nodes))
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------------------- dispatch
def load_inventory(spec: str | Path) -> Inventory:
    """An inventory from ``spec``: a GPU count (homogeneous 8-GPU nodes), a YAML file, or a public
    inventory file recognised by its header (openb, Crux) or name (``pai_machine_spec.csv``)."""
    text = str(spec).strip()
    if text.isdigit():
        count = int(text)
        if count <= 0:
            raise InputError(f"a cluster needs at least one GPU, got {count}")
        return homogeneous_inventory(count)
    path = Path(text)
    if not path.exists():
        raise InputError(f"inventory {text!r} is neither a GPU count nor an existing file")
    if not path.is_file():
        raise InputError(f"inventory {text!r} is not a file")
    if path.suffix in (".yaml", ".yml"):
        return inventory_from_yaml(path)
    if path.with_suffix(".header").exists():
        return inventory_from_pai(path)
    with path.open() as fh:
        first = fh.readline().strip()
    if first.startswith("sn,"):
        return inventory_from_openb(path)
    if first.startswith("ip,") and "ASW" in first:
        return inventory_from_crux(path)
    raise InputError(f"inventory file {path}: unknown format (expected YAML, an openb node list, a PAI "
                     "machine spec with its .header, or a Crux topology)")
