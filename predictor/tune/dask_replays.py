"""Replays as tasks on a ``dask.distributed`` cluster: a study's trials, and ``simulate --workers``.

How the work is laid out
------------------------
* :func:`dask_client` opens a ``LocalCluster`` of K worker **processes** (one thread each: a replay
  is pure-Python and CPU-bound, so threads would share one core), or connects to the scheduler the
  user names (``tcp://host:8786``: dask-jobqueue on Slurm, the Dask Kubernetes operator...).
* :class:`WindowReplays` sends a window's data (its ``JobTable``, what each prediction kind tells
  about its jobs, the inventory, the replay settings) to every worker **once**, as a worker plugin
  (:class:`WindowData`): the scheduler keeps registered plugins and runs them on every worker that
  joins later, so a worker restarted by its nanny after a crash has the data before it takes a task.
  Each task then carries only a policy (a few kB) and returns the replay's metrics.
* A worker that dies mid-task loses only the tasks it held: the scheduler reruns them elsewhere
  (``distributed.scheduler.allowed-failures`` deaths per task before it gives up). A replay is a
  deterministic function of the window and the policy, so the rerun returns what the lost run would
  have: the study's result does not depend on which worker ran what, or how often.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import cloudpickle
from distributed import Client, Future, LocalCluster, WorkerPlugin, as_completed

from features.errors import InputError
from predictor.capacity.inventory import Inventory
from predictor.policy.config import PolicyConfig
from predictor.sim.experiment import replay_each
from predictor.sim.metrics import METRIC_KEYS, MetricsConfig, part_metrics, policy_metrics
from predictor.sim.predictions import PredictionTable
from predictor.sim.record import ReplayRecord
from predictor.sim.replay import SimConfig
from predictor.sim.workload import JobTable
from predictor.tune.choice import GUARDS, part_key
from predictor.tune.windows import Window

__all__ = ["dask_client", "default_workers", "ReplayData", "WindowData", "WindowReplays", "ReplayOutcome",
           "DaskReplayMany"]

#: Windows loaded in this process, by key (filled by :class:`WindowData` on a worker).
_LOADED: dict[str, ReplayData] = {}


def default_workers() -> int:
    """K of the default ``LocalCluster``: one worker process per CPU core."""
    return max(1, os.cpu_count() or 1)


@contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None) -> Iterator[Client]:
    """A client of a fresh ``LocalCluster`` of ``workers`` processes, or of the named scheduler.

    Raises
    ------
    InputError
        Both or a bad value given, or the scheduler cannot be reached.
    """
    if workers is not None and scheduler is not None:
        raise InputError("give --workers or --dask-scheduler, not both")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(f"--dask-scheduler {scheduler}: cannot connect ({exc})") from None
        try:
            yield client
        finally:
            client.close()
        return
    cluster = LocalCluster(n_workers=workers or default_workers(), threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@dataclass(frozen=True)
class ReplayData:
    """Everything a worker needs to replay policies on one window."""

    jobs: JobTable
    predictions: dict[str, PredictionTable]
    inventory: Inventory
    sim: SimConfig
    metrics: MetricsConfig
    parts: int = 0  # also the rule's metrics on this many consecutive parts of the window (0: none)

    @classmethod
    def of(cls, window: Window, inventory: Inventory, sim: SimConfig, metrics: MetricsConfig,
           parts: int = 0) -> ReplayData:
        return cls(window.jobs, dict(window.predictions), inventory, replace(sim, show_progress=False), metrics,
                   parts)


class WindowData(WorkerPlugin):
    """Worker plugin: unpickles one window's :class:`ReplayData` into the worker process once."""

    def __init__(self, key: str, data: ReplayData) -> None:
        self.key = key
        self.name = f"predictor-replay-data-{key}"
        self.payload = cloudpickle.dumps(data)  # Inventory holds mappingproxies, which plain pickle refuses

    def setup(self, worker=None) -> None:
        _LOADED[self.key] = cloudpickle.loads(self.payload)

    def teardown(self, worker=None) -> None:
        _LOADED.pop(self.key, None)


@dataclass(frozen=True)
class ReplayOutcome:
    """What a replay task returns: the ``report.json`` metric set, CPU seconds, the worker's pid."""

    metrics: dict[str, float | None]
    cpu_s: float
    pid: int


def _plain(v):  # noqa: ANN001, ANN202 - numpy scalar or float -> float / int, NaN -> None
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and v != v else v


def _metrics(record: ReplayRecord, config: MetricsConfig, parts: int = 0) -> dict[str, float | None]:
    """The ``report.json`` metric set, then with ``parts`` the choice rule's metrics on each part of
    the window (``predictor.tune.choice.part_key``)."""
    values, _ = policy_metrics(record, config)
    out: dict[str, float | None] = {k: _plain(values[k]) for k in METRIC_KEYS}
    if parts:
        for i, part in enumerate(part_metrics(record, parts, config), start=1):
            out.update({part_key(i, k): _plain(part[k]) for k in GUARDS})
    return out


def replay_record(data: ReplayData, name: str, policy: PolicyConfig, predictions: str) -> ReplayRecord:
    """One replay of ``data``'s window under ``policy``, told the ``predictions`` kind."""
    run = (name, policy, data.predictions[predictions])
    return replay_each(data.jobs, data.inventory, [run], data.sim)[0]


def replay_task(key: str, name: str, policy: PolicyConfig, predictions: str) -> ReplayOutcome:
    """The task a worker runs: replay the loaded window ``key`` under ``policy``."""
    data = _LOADED.get(key)
    if data is None:
        raise RuntimeError(f"replay data {key} is not loaded on this worker (was its plugin registered?)")
    start = time.process_time()
    metrics = _metrics(replay_record(data, name, policy, predictions), data.metrics, data.parts)
    return ReplayOutcome(metrics, time.process_time() - start, os.getpid())


class WindowReplays:
    """Replays of one window on a Dask client; the window's data goes to each worker once.

    Use as a context manager: leaving it removes the data from the workers.
    """

    def __init__(self, client: Client, window: Window, inventory: Inventory, sim: SimConfig,
                 metrics: MetricsConfig, parts: int = 0) -> None:
        self.client = client
        self.key = f"{window.name}-{uuid.uuid4().hex[:12]}"
        self.plugin = WindowData(self.key, ReplayData.of(window, inventory, sim, metrics, parts))

    def __enter__(self) -> WindowReplays:
        self.client.register_plugin(self.plugin, name=self.plugin.name)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.client.unregister_worker_plugin(self.plugin.name)
        except Exception:  # noqa: BLE001 - the cluster may be gone already; its workers with it
            logging.getLogger(__name__).debug("could not unregister %s", self.plugin.name, exc_info=True)

    def submit(self, label: str, name: str, policy: PolicyConfig, predictions: str) -> Future:
        """Start one replay; ``label`` names the task (a trial number, a policy)."""
        return self.client.submit(replay_task, self.key, name, policy, predictions, key=f"replay-{self.key}-{label}",
                                  pure=False)

    def run(self, items: Sequence[tuple[str, str, PolicyConfig, str]]) -> list[ReplayOutcome | BaseException]:
        """Replay every ``(label, name, policy, predictions)`` in parallel; outcomes in order, a task's
        exception in its place."""
        futures = {self.submit(*item): i for i, item in enumerate(items)}
        out: list[ReplayOutcome | BaseException | None] = [None] * len(items)
        # each result is fetched as soon as its task ends and the task then released: a result left in
        # a worker's memory would be lost with the worker, and its trial computed again
        for fut in as_completed(list(futures), loop=self.client.loop):
            try:
                out[futures[fut]] = fut.result()
            except Exception as exc:  # noqa: BLE001 - reported per task by the caller
                out[futures[fut]] = exc
            fut.release()
        return out  # type: ignore[return-value]


class DaskReplayMany:
    """``predictor.sim.experiment``'s ``replay_many`` on a Dask client: ``simulate --workers`` replays
    its policies in parallel, the workload and each prediction table sent to the workers once."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def __call__(self, table: JobTable, inventory: Inventory, runs: Sequence[tuple[str, PolicyConfig, PredictionTable]],
                 sim: SimConfig) -> list[ReplayRecord]:
        sim = replace(sim, show_progress=False)
        [jobs, inv] = self.client.scatter([table, inventory], broadcast=True, hash=False)
        tables: dict[int, Future] = {}
        for _, _, pred in runs:
            if id(pred) not in tables:
                tables[id(pred)] = self.client.scatter(pred, broadcast=True, hash=False)
        futures = [self.client.submit(_replay_one, jobs, inv, name, policy, tables[id(pred)], sim,
                                      key=f"simulate-{name}-{uuid.uuid4().hex[:8]}", pure=False)
                   for name, policy, pred in runs]
        return self.client.gather(futures)


def _replay_one(table: JobTable, inventory: Inventory, name: str, policy: PolicyConfig, pred: PredictionTable,
                sim: SimConfig) -> ReplayRecord:
    return replay_each(table, inventory, [(name, policy, pred)], sim)[0]
