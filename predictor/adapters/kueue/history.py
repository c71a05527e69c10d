"""Finished Kueue Workloads, read through the Kubernetes API and written the way the ``kueue`` reader
reads them (the ``List`` that ``kubectl get workloads -A -o json`` prints).

A Workload has ended when its ``Finished`` condition is true, or when it was deactivated after an
eviction (preempted for good, or past its maximum execution time): the reader's own rule
(:mod:`features.sources.kueue`). Workloads are listed in pages (``limit`` / ``continue``), so a large
cluster is read in bounded steps; only ended ones are written. Kubernetes deletes a Workload with
its Job, so run this more often than finished Jobs are garbage-collected.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from features.schema import TERMINAL_STATES
from features.sources.kueue import workload_record
from predictor.adapters.kueue.adapter import GROUP, _classify

__all__ = ["export_finished_workloads", "PAGE_SIZE"]

PAGE_SIZE = 500


def export_finished_workloads(dest: Path, api_client: client.ApiClient, *, api_version: str = "v1beta2",
                              page_size: int = PAGE_SIZE) -> tuple[float, int]:
    """Write every ended Workload to ``dest`` as a ``v1`` List; return (read-at time, how many).

    Raises
    ------
    SchedulerUnavailable, SchedulerRejected
        The API server could not be reached, or refused the list (e.g. no RBAC to list workloads).
    """
    custom = client.CustomObjectsApi(api_client)
    read_at = time.time()
    written = 0
    token: str | None = None
    with open(dest, "w", encoding="utf-8") as out:
        out.write('{"apiVersion": "v1", "kind": "List", "items": [\n')
        while True:
            kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            try:
                raw = custom.list_cluster_custom_object(GROUP, api_version, "workloads", **kwargs)
                page = json.loads(raw.data or b"{}")
            except Exception as exc:  # ApiException, urllib3 and OS errors: classified like the adapter's
                raise _classify(exc, "LIST workloads") from None
            for item in page.get("items") or []:
                item.setdefault("apiVersion", f"{GROUP}/{api_version}")
                item.setdefault("kind", "Workload")
                if workload_record(item).get("state") in TERMINAL_STATES:
                    out.write((",\n" if written else "") + json.dumps(item, separators=(",", ":")))
                    written += 1
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
        out.write("\n]}\n")
    return read_at, written
