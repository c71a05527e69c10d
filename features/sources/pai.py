"""Alibaba PAI GPU cluster trace, 2020 (``cluster-trace-gpu-v2020``, NSDI'22 *MLaaS in the Wild*).

Pass the table files together: ``pai_job_table`` (required), ``pai_task_table``,
``pai_instance_table``, ``pai_sensor_table``, ``pai_group_tag_table`` (each optional). Files are
recognised by their header line, or, for the published header-less CSVs, by their number of
columns (6, 10, 9, 16 and 5), so their names do not matter.

Mapping (one row per job, schema from the trace's README):

- job_id = ``inst_id`` (the README: "treat it as job_id"); user = ``user``; no team or queue.
- job_name = the group tag (``group``: instances with the same inputs, the trace's notion of a
  recurring job) when tagged; the native hash ``job_name`` is kept as extra ``pai_job_name``, and
  ``workload`` / ``gpu_type_spec`` from the group tag table as extras.
- Request, summed over the job's tasks with ``inst_num`` instances each: cpus = plan_cpu/100;
  mem_mib = plan_mem (GiB) x 1024; GPUs: an instance asking ``plan_gpu`` percent holds
  ceil(plan_gpu/100) devices, so num_gpus is the sum of those and gpu_milli is the average share
  per device (``50`` -> 500). gpu_type is the task's allocated ``gpu_type`` (``MISC`` = older GPUs).
- Times: job ``start_time`` is the submission, job ``end_time`` the completion; start_ts is the
  earliest instance (else task) launch; ``0`` means unknown. Times are shifted by
  :data:`PAI_EPOCH_OFFSET_S`, a whole number of weeks, so weekday and time of day (UTC+8 clock, as
  the README describes) are kept while the fake 1970 dates land in July 2020, the trace's months.
- State: Terminated -> COMPLETED, Failed -> FAILED, Running -> RUNNING, Waiting -> PENDING.
- peak_vram_mib: the largest ``max_gpu_wrk_mem`` (GiB per instance) over the job's instances,
  divided by the GPUs one instance of that task holds.
- num_nodes: distinct machines the job's instances ran on.

Memory: the side tables are folded into per-job aggregates keyed by 64-bit hashes of
``job_name`` (a few tens of bytes per job); only the job table is streamed into chunks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from features.errors import InputError
from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    Reader,
    malformed_reason,
    read_head,
    rechunk,
    reject_rows,
    to_float,
)

#: 2020-07-02T00:00:00Z = 2635 weeks after 1970-01-01 (both Thursdays).
PAI_EPOCH_OFFSET_S = 2635 * 7 * 86400.0

TABLES: dict[str, tuple[str, ...]] = {
    "job": ("job_name", "inst_id", "user", "status", "start_time", "end_time"),
    "task": ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
             "plan_gpu", "gpu_type"),
    "instance": ("job_name", "task_name", "inst_name", "worker_name", "inst_id", "status", "start_time", "end_time",
                 "machine"),
    "sensor": ("job_name", "task_name", "worker_name", "inst_id", "machine", "gpu_name", "cpu_usage", "gpu_wrk_util",
               "avg_mem", "max_mem", "avg_gpu_wrk_mem", "max_gpu_wrk_mem", "read", "write", "read_count",
               "write_count"),
    "group_tag": ("inst_id", "user", "gpu_type_spec", "group", "workload"),
}
_NUMERIC = {"inst_num", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu", "cpu_usage", "gpu_wrk_util",
            "avg_mem", "max_mem", "avg_gpu_wrk_mem", "max_gpu_wrk_mem", "read", "write", "read_count", "write_count"}
_STATUS = {"Terminated": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING", "Waiting": "PENDING"}


def _hash(values: pd.Series) -> np.ndarray:
    return pd.util.hash_array(values.astype(object).to_numpy())


class PaiReader(Reader):
    """Alibaba PAI 2020 job/task/instance/sensor/group-tag tables, joined into one row per job."""

    name = "pai"
    summary = "Alibaba PAI 2020 tables (job, task, instance, sensor, group tag), joined per job"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        return "pai_" in path.name and "_table" in path.name

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rejects: list[pd.DataFrame] = []

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        by_table: dict[str, list[Path]] = {}
        for path in paths:
            by_table.setdefault(identify_table(path), []).append(path)
        if "job" not in by_table:
            raise InputError("pai: no pai_job_table among the inputs (it is required; the task, instance, sensor "
                             "and group tag tables are optional)")
        tasks = self._task_aggregates(by_table.get("task", []), chunk_rows)
        instances = self._instance_aggregates(by_table.get("instance", []), chunk_rows)
        sensors = self._sensor_aggregates(by_table.get("sensor", []), tasks[1], chunk_rows)
        tags = self._group_tags(by_table.get("group_tag", []), chunk_rows)
        if self._rejects:
            yield pd.concat(self._rejects, ignore_index=True)
            self._rejects.clear()
        for path in by_table["job"]:
            for chunk in self._table_chunks(path, "job", chunk_rows):
                yield self._convert(chunk, tasks[0], instances, sensors, tags)
            if self._rejects:
                yield pd.concat(self._rejects, ignore_index=True)
                self._rejects.clear()

    # -- side tables -> per-job aggregates -------------------------------------------------------

    def _task_aggregates(self, paths: list[Path], chunk_rows: int) -> tuple[pd.DataFrame, pd.Series]:
        parts, per_task = [], []
        for path in paths:
            for t in self._table_chunks(path, "task", chunk_rows):
                inst = t["inst_num"].fillna(1.0)
                share = t["plan_gpu"].fillna(0.0) / 100.0
                devices = np.where(share > 0, np.ceil(share), 0.0)
                frame = pd.DataFrame({
                    "job": _hash(t["job_name"]),
                    "cpus": inst * t["plan_cpu"] / 100.0,
                    "mem_mib": inst * t["plan_mem"] * 1024.0,
                    "num_gpus": inst * devices,
                    "gpu_share": inst * share,
                    "gpu_type": t["gpu_type"].where(share > 0),
                    "task_start": t["start_time"].where(t["start_time"] > 0),
                })
                parts.append(frame.groupby("job").agg(
                    cpus=("cpus", "sum"), mem_mib=("mem_mib", "sum"), num_gpus=("num_gpus", "sum"),
                    gpu_share=("gpu_share", "sum"), gpu_type=("gpu_type", "first"), task_start=("task_start", "min")))
                per_task.append(pd.Series(np.maximum(devices, 1.0),
                                          index=_hash(t["job_name"] + "\0" + t["task_name"].fillna(""))))
        if not parts:
            return pd.DataFrame(), pd.Series(dtype="float64")
        agg = pd.concat(parts).groupby(level=0).agg(
            {"cpus": "sum", "mem_mib": "sum", "num_gpus": "sum", "gpu_share": "sum", "gpu_type": "first",
             "task_start": "min"})
        gpus_per_instance = pd.concat(per_task)
        return agg, gpus_per_instance[~gpus_per_instance.index.duplicated()]

    def _instance_aggregates(self, paths: list[Path], chunk_rows: int) -> pd.DataFrame:
        starts, pairs = [], []
        for path in paths:
            for t in self._table_chunks(path, "instance", chunk_rows):
                job = _hash(t["job_name"])
                starts.append(pd.Series(t["start_time"].where(t["start_time"] > 0).to_numpy(), index=job)
                              .groupby(level=0).min())
                pair = _hash(t["job_name"] + "\0" + t["machine"].fillna(""))
                has_machine = t["machine"].notna().to_numpy()
                pairs.append(pd.Series(job[has_machine], index=pair[has_machine]))
                pairs = [pd.concat(pairs)] if len(pairs) > 1 else pairs
                pairs[0] = pairs[0][~pairs[0].index.duplicated()]
        if not starts:
            return pd.DataFrame()
        agg = pd.DataFrame({"instance_start": pd.concat(starts).groupby(level=0).min()})
        if pairs:
            agg["num_nodes"] = pairs[0].value_counts()
        return agg

    def _sensor_aggregates(self, paths: list[Path], gpus_per_instance: pd.Series, chunk_rows: int) -> pd.Series:
        peaks = []
        for path in paths:
            for t in self._table_chunks(path, "sensor", chunk_rows):
                task_key = _hash(t["job_name"] + "\0" + t["task_name"].fillna(""))
                per_instance = gpus_per_instance.reindex(task_key).fillna(1.0).to_numpy()
                peak = t["max_gpu_wrk_mem"].to_numpy() * 1024.0 / per_instance
                peaks.append(pd.Series(peak, index=_hash(t["job_name"])).groupby(level=0).max())
        if not peaks:
            return pd.Series(dtype="float64")
        return pd.concat(peaks).groupby(level=0).max()

    def _group_tags(self, paths: list[Path], chunk_rows: int) -> pd.DataFrame:
        parts = []
        for path in paths:
            for t in self._table_chunks(path, "group_tag", chunk_rows):
                parts.append(t[["inst_id", "group", "workload", "gpu_type_spec"]])
        if not parts:
            return pd.DataFrame()
        tags = pd.concat(parts, ignore_index=True).drop_duplicates("inst_id")
        return tags.set_index(_hash(tags["inst_id"])).drop(columns="inst_id")

    # -- job table -> canonical ---------------------------------------------------------------

    def _convert(self, j: pd.DataFrame, tasks: pd.DataFrame, instances: pd.DataFrame, sensors: pd.Series,
                 tags: pd.DataFrame) -> pd.DataFrame:
        job = _hash(j["job_name"])
        t = tasks.reindex(job) if len(tasks) else pd.DataFrame(index=job)
        i = instances.reindex(job) if len(instances) else pd.DataFrame(index=job)
        g = tags.reindex(_hash(j["inst_id"])) if len(tags) else pd.DataFrame(index=job)

        def col(frame: pd.DataFrame, name: str) -> np.ndarray:
            return frame[name].to_numpy() if name in frame else np.full(len(j), np.nan)

        def text(frame: pd.DataFrame, name: str) -> pd.Series:
            return (frame[name].astype("string").reset_index(drop=True) if name in frame
                    else pd.Series(pd.NA, index=j.index, dtype="string"))

        num_gpus = col(t, "num_gpus")
        share = col(t, "gpu_share")
        milli = np.where(num_gpus > 0, np.clip(np.round(1000.0 * share / np.where(num_gpus > 0, num_gpus, 1)), 1, 1000),
                         np.nan)
        start = np.fmin(col(i, "instance_start"), col(t, "task_start"))
        status = j["status"].astype("string").str.strip()
        state = status.map(_STATUS).astype("string").fillna(status.str.upper())
        ended = state.isin(["COMPLETED", "FAILED"]).to_numpy()
        submit = j["start_time"].where(j["start_time"] > 0).to_numpy()
        end = j["end_time"].where(j["end_time"] > 0).to_numpy()
        frame = pd.DataFrame({
            "job_id": j["inst_id"].astype("string").reset_index(drop=True),
            "user": j["user"].astype("string").reset_index(drop=True),
            "job_name": text(g, "group"),
            "num_gpus": num_gpus,
            "gpu_milli": milli,
            "gpu_type": text(t, "gpu_type"),
            "num_nodes": col(i, "num_nodes"),
            "cpus": col(t, "cpus"),
            "mem_mib": col(t, "mem_mib"),
            "submit_ts": PAI_EPOCH_OFFSET_S + submit,
            "start_ts": PAI_EPOCH_OFFSET_S + start,
            "end_ts": np.where(ended, PAI_EPOCH_OFFSET_S + end, np.nan),
            "state": state.reset_index(drop=True),
            "peak_vram_mib": sensors.reindex(job).to_numpy() if len(sensors) else np.nan,
            "pai_job_name": j["job_name"].astype("string").reset_index(drop=True),
            "workload": text(g, "workload"),
            "gpu_type_spec": text(g, "gpu_type_spec"),
            "source": self.name,
        })
        frame[READER_REJECT] = j[READER_REJECT].reset_index(drop=True)
        return frame

    def _table_chunks(self, path: Path, table: str, chunk_rows: int) -> Iterator[pd.DataFrame]:
        """Chunks of one table as pandas; numeric columns parsed, bad rows noted in ``self._rejects``."""
        names = TABLES[table]
        has_header = _first_fields(path) == list(names)

        def on_invalid(row: pacsv.InvalidRow) -> str:
            self._rejects.append(reject_rows(
                [malformed_reason(f"pai_{table}_table", row)], self.name, raw=[row.text], source_file=[str(path)]))
            return "skip"

        with self.tracker.open_binary(path) as stream:
            csv = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(block_size=8 << 20, column_names=list(names), skip_rows=int(has_header)),
                parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())))
            for chunk in rechunk(csv, chunk_rows):
                yield self._typed(chunk, table, path)

    def _typed(self, t: pa.Table, table: str, path: Path) -> pd.DataFrame:
        frame = pd.DataFrame({c: t[c].to_pandas() for c in t.column_names})
        reason = np.full(len(frame), None, dtype=object)
        for c in t.column_names:
            if c in _NUMERIC:
                frame[c], bad = to_float(t[c])
                reason[bad & (reason == None)] = f"unparseable {c} in pai_{table}_table"  # noqa: E711
        bad_rows = reason != None  # noqa: E711
        if bad_rows.any() and table != "job":  # side-table rows cannot be kept: report them, use the rest
            self._rejects.append(reject_rows(list(reason[bad_rows]), self.name,
                                             pai_job_name=list(frame.loc[bad_rows, "job_name"]),
                                             source_file=[str(path)] * int(bad_rows.sum())))
            frame = frame.loc[~bad_rows].reset_index(drop=True)
        elif table == "job":
            frame[READER_REJECT] = pd.Series(reason, dtype="string")
        return frame


def _first_fields(path: Path) -> list[str]:
    line = read_head(path, 1 << 14).split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return [f.strip() for f in line.split(",")] if line else []


def identify_table(path: Path) -> str:
    """Which PAI table ``path`` holds, from its header line or its column count."""
    fields = _first_fields(path)
    for table, names in TABLES.items():
        if fields == list(names):
            return table
    by_count = {len(names): table for table, names in TABLES.items()}
    if len(fields) in by_count:
        return by_count[len(fields)]
    expected = "; ".join(f"pai_{t}_table: {', '.join(n)}" for t, n in TABLES.items())
    raise InputError(f"{path}: not a PAI table: {len(fields)} columns, expected one of: {expected}")
