"""A Kubernetes API emulator (kmock's KubernetesEmulator) on a local port, served from a background
thread so the synchronous official ``kubernetes`` client can talk to it.

It is an in-memory fake: no schema validation, no admission, no Kueue controller; objects are merged
as plain JSON on patch. Tests therefore check the objects it holds against the real CRD schemas.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kmock
from kubernetes import client

KUEUE_KINDS = {"workloads": ("Workload", True), "workloadpriorityclasses": ("WorkloadPriorityClass", False),
               "resourceflavors": ("ResourceFlavor", False), "clusterqueues": ("ClusterQueue", False),
               "localqueues": ("LocalQueue", True), "topologies": ("Topology", False), "cohorts": ("Cohort", False)}


@contextmanager
def kube_emulator(api_version: str = "v1beta2") -> Iterator[tuple[Any, client.ApiClient]]:
    """Yield (emulator, ApiClient pointed at it); stop the server afterwards."""
    ready: queue.Queue = queue.Queue()
    stop = threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
                for plural, (kind, namespaced) in KUEUE_KINDS.items():
                    emulator.resources[f"kueue.x-k8s.io/{api_version}/{plural}"] = kmock.ResourceInfo(
                        namespaced=namespaced, kind=kind)
                emulator.resources["batch/v1/jobs"] = kmock.ResourceInfo(namespaced=True, kind="Job")
                ready.put((emulator, str(server.url).rstrip("/")))
                while not stop.is_set():
                    await asyncio.sleep(0.02)

        try:
            asyncio.run(main())
        except Exception as exc:  # surface start-up failures to the waiting test
            ready.put(exc)

    thread = threading.Thread(target=serve, name="kube-emulator", daemon=True)
    thread.start()
    got = ready.get(timeout=30)
    if isinstance(got, Exception):
        raise got
    emulator, url = got
    api = client.ApiClient(client.Configuration(host=url))
    try:
        yield emulator, api
    finally:
        api.close()
        stop.set()
        thread.join(timeout=10)
