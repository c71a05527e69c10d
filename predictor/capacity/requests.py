"""GPU requests against a cluster: which of the layout's GPU types a job may run on (rule *GPU request*).

The one reader of ``gpu_type`` requests for the rules layer (``predictor.policy.intake``) and for
``predictor policy size``. A request lists the acceptable types (``"A10|A100-80GB"``, ``"a10,a100"``);
each name is resolved through the cluster's vocabulary (``features.gpu_types``: case, vendor prefix,
memory suffix, Slurm gres types, Kubernetes product labels, the inventory's own aliases). A name the
cluster lacks but that is a known GPU model allows nothing here (the job can never run on this
cluster, and its decision says so); a name that is no GPU model at all is an error naming the types.
"""

from __future__ import annotations

import numpy as np

from features.errors import InputError
from features.gpu_types import DEFAULT_VOCABULARY, split_request
from predictor.capacity.layout import ClusterLayout

__all__ = ["requested_types"]


def requested_types(gpu_type: np.ndarray, layout: ClusterLayout, job_ids: np.ndarray | None = None
                    ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Rule *GPU request*: (n_jobs, n_types) bool of the layout types each job accepts, and the
    requests as written; (None, None) when no job names a type.

    Raises
    ------
    InputError
        A request names something that is no GPU model (the message lists the cluster's types).
    """
    types = np.asarray(gpu_type, dtype=object)
    asked = np.array([isinstance(t, str) and bool(t.strip()) for t in types], dtype=bool)
    if not asked.any():
        return None, None
    vocab = layout.inventory.vocabulary
    mask = np.ones((len(types), layout.n_types), dtype=bool)
    rows_of: dict[str, np.ndarray] = {}
    for i in np.flatnonzero(asked):
        request = types[i]
        row = rows_of.get(request)
        if row is None:
            row = np.zeros(layout.n_types, dtype=bool)
            for name in split_request(request):
                found = vocab.matches(name)
                if not found and not DEFAULT_VOCABULARY.matches(name):
                    who = f"job {job_ids[i]}: " if job_ids is not None else ""
                    raise InputError(f"{who}unknown GPU type {name!r}; this cluster has "
                                     f"{', '.join(layout.gpu_types) or 'no GPUs'} (known models: "
                                     f"{', '.join(DEFAULT_VOCABULARY.known())})")
                for t in found:
                    code = layout.type_index(t)
                    if code >= 0:
                        row[code] = True
            rows_of[request] = row
        mask[i] = row
    request_text = np.where(asked, types, None).astype(object)
    return mask, request_text
