"""Node eligibility: on which nodes a constrained job may run (rule *node eligibility*, docs/residency.md).

A job's constraint (``features.constraints``: terms ``key=v1|v2``, all of which must hold) is
matched against each node's residency attributes (``predictor.capacity.inventory.Node``):

* ``region`` / ``site`` / ``pool``: the node's attribute is one of the values;
* ``partition``: one of the node's partitions is;
* ``label``: the node carries one of the tags (its ``features``, or a label whose value is ``true``);
* any other key: the node's label of that name has one of the values.

A node without the attribute satisfies no term on it (unknown is never "anywhere"). The mask of a
constraint text is computed once per layout and cached (:func:`node_mask`); a cycle's
:class:`NodeEligibility` maps each pending job to the GPU mask of its constraint, which the capacity
book intersects with the GPU-type mask wherever it places, reserves or frees GPUs for that job
(``CapacityBook.restrict``): no start, backfill, reservation or preemption can put the job on a GPU
outside it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from features.constraints import Term, parse_constraints
from predictor.capacity.inventory import Node
from predictor.capacity.layout import ClusterLayout

__all__ = ["node_values", "node_mask", "gpu_mask", "NodeEligibility", "why_nowhere"]

_MASKS: weakref.WeakKeyDictionary[ClusterLayout, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()


def node_values(node: Node, key: str) -> frozenset[str]:
    """The values a node has for constraint key ``key`` (see the module docstring)."""
    if key in ("region", "site", "pool"):
        value = getattr(node, key)
        return frozenset() if value is None else frozenset([value])
    if key == "partition":
        return frozenset(node.partitions)
    if key == "label":
        return frozenset(node.features) | frozenset(k for k, v in node.labels if v.lower() == "true")
    return frozenset(v for k, v in node.labels if k == key)


def _term_mask(layout: ClusterLayout, term: Term) -> np.ndarray:
    key, values = term
    return np.fromiter((bool(node_values(n, key) & values) for n in layout.inventory.nodes), dtype=bool,
                       count=layout.n_nodes)


def node_mask(layout: ClusterLayout, text: str) -> np.ndarray:
    """Nodes (bool, shape (n_nodes,)) on which constraint ``text`` holds; cached per layout."""
    cache = _MASKS.setdefault(layout, {})
    hit = cache.get(text)
    if hit is None:
        hit = np.ones(layout.n_nodes, dtype=bool)
        for term in parse_constraints(text):
            hit &= _term_mask(layout, term)
        hit.setflags(write=False)
        cache[text] = hit
    return hit


def gpu_mask(layout: ClusterLayout, text: str) -> np.ndarray:
    """GPUs (bool, shape (n_gpus,)) on the nodes where constraint ``text`` holds."""
    cache = _MASKS.setdefault(layout, {})
    key = "\0gpu:" + text
    hit = cache.get(key)
    if hit is None:
        hit = node_mask(layout, text)[layout.gpu_node] if layout.n_gpus else np.zeros(0, dtype=bool)
        hit.setflags(write=False)
        cache[key] = hit
    return hit


@dataclass(frozen=True, eq=False)
class NodeEligibility:
    """The pending jobs' eligibility in one cycle.

    Attributes
    ----------
    codes : ndarray of int64, shape (n_jobs,)
        Index into ``texts`` / ``gpu_masks`` of each job's constraint; ``-1``: anywhere.
    texts : tuple of str
        The distinct effective constraints (canonical text).
    gpu_masks : tuple of ndarray of bool, shape (n_gpus,)
    type_gpus : ndarray of int64, shape (n_texts, n_types)
        GPUs of each type the constraint allows.
    """

    codes: np.ndarray
    texts: tuple[str, ...]
    gpu_masks: tuple[np.ndarray, ...]
    type_gpus: np.ndarray

    @classmethod
    def of(cls, layout: ClusterLayout, constraints: Sequence[object] | np.ndarray | None) -> NodeEligibility | None:
        """From each job's effective constraint text (None: anywhere); None when no job has one."""
        if constraints is None:
            return None
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(t, len(index)) if isinstance(t, str) and t else -1
                             for t in constraints), dtype=np.int64, count=len(constraints))
        if not index:
            return None
        texts = tuple(index)
        masks = tuple(gpu_mask(layout, t) for t in texts)
        type_gpus = np.array([np.bincount(layout.gpu_type[m], minlength=layout.n_types) for m in masks],
                             dtype=np.int64).reshape(len(texts), layout.n_types)
        return cls(codes=codes, texts=texts, gpu_masks=masks, type_gpus=type_gpus)

    def text_of(self, row: int) -> str | None:
        code = int(self.codes[row])
        return self.texts[code] if code >= 0 else None

    def type_allows(self, num_gpus: np.ndarray) -> np.ndarray:
        """(n_jobs, n_types) bool: the constraint leaves at least the gang's GPUs of that type
        (all True for unconstrained jobs)."""
        out = np.ones((len(self.codes), self.type_gpus.shape[1]), dtype=bool)
        rows = np.flatnonzero(self.codes >= 0)
        out[rows] = self.type_gpus[self.codes[rows]] >= np.asarray(num_gpus)[rows, None]
        return out


def why_nowhere(layout: ClusterLayout, text: str, num_gpus: int, types: Sequence[int] | None = None) -> str:
    """A sentence naming the constraint a job cannot run under here, and why."""
    terms = parse_constraints(text)
    for key, values in terms:
        hit = _term_mask(layout, (key, values))
        if not hit.any():
            have = sorted({v for n in layout.inventory.nodes for v in node_values(n, key)})
            listed = f"{key} values here: {', '.join(have[:8])}" if have else f"no node has a {key}"
            return (f"constraint {text}: no node satisfies {key}={'|'.join(sorted(values))} ({listed})")
    nodes = node_mask(layout, text)
    gpus = gpu_mask(layout, text)
    if not nodes.any():
        return f"constraint {text}: no node satisfies all of its terms together"
    kinds = list(range(layout.n_types)) if types is None else list(types)
    held = {layout.gpu_types[t]: int((gpus & (layout.gpu_type == t)).sum()) for t in kinds}
    what = ", ".join(f"{n} x {t}" for t, n in held.items() if n) or "no GPU of the types it may use"
    return (f"constraint {text}: the {int(nodes.sum())} node(s) it may run on hold {what}; "
            f"it needs {num_gpus} GPUs of one type")
