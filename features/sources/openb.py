"""Alibaba GPU cluster pod list, 2023 ("openb", ATC'23 *Beware of Fragmentation*).

Columns: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time`` (times in seconds since the trace start).

Mapping: name -> job_id; num_gpu -> num_gpus; gpu_milli -> gpu_milli (the share of each GPU a
GPU-sharing pod asks for; 0 on CPU pods -> null); gpu_spec (allowed GPU models, ``V100M16|V100M32``)
-> gpu_type; cpu_milli / 1000 -> cpus; memory_mib -> mem_mib; qos (LS, BE, Burstable, Guaranteed)
-> tier. The trace names no user, team or queue: those stay null.

Times: creation -> submit_ts, scheduled -> start_ts, deletion -> end_ts for pods that ended
(``Succeeded`` -> COMPLETED, ``Failed`` -> FAILED). ``Running`` pods were still running when the
trace ended and ``Pending`` pods had not been scheduled: both are censored (RUNNING/PENDING), with
no end invented; their native deletion time is kept in the extra column ``deletion_ts``.
Relative seconds are placed at :data:`features.sources._base.TRACE_EPOCH_TS`
(2020-01-01T00:00:00Z): gaps and order are real, calendar dates are not.

End of log: a cheap first pass reads only the three time columns and takes the largest value, so
running pods get the observed lower bound ``log_end - start`` from the first chunk on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from features.sources._base import (
    DEFAULT_CHUNK_ROWS,
    READER_REJECT,
    TRACE_EPOCH_TS,
    InputTracker,
    Reader,
    first_reason,
    malformed_reason,
    rechunk,
    reject_rows,
    require_columns,
    to_float,
)

REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time",
            "deletion_time", "scheduled_time")
OPTIONAL = ("gpu_spec",)
_PHASES = {"Succeeded": "COMPLETED", "Failed": "FAILED", "Running": "RUNNING", "Pending": "PENDING"}
_TIMES = ("creation_time", "deletion_time", "scheduled_time")


class OpenbReader(Reader):
    """Alibaba openb pod lists (``openb_pod_list_*.csv``)."""

    name = "openb"
    summary = "Alibaba GPU cluster pod list 2023 (openb; fractional gpu_milli, Running = censored)"

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        first = head.split(b"\n", 1)[0].decode("utf-8", "replace")
        return {"gpu_milli", "pod_phase", "creation_time"} <= {c.strip() for c in first.split(",")}

    def log_end_hint(self, paths: Sequence[Path]) -> float | None:
        latest = -np.inf
        for path in paths:  # a cheap pass over the three time columns, not counted as progress
            for batch in self._batches(path, include=_TIMES, tracker=InputTracker()):
                for col in _TIMES:
                    values, _ = to_float(batch.column(col))
                    if np.isfinite(values).any():
                        latest = max(latest, float(np.nanmax(values)))
        return TRACE_EPOCH_TS + latest if np.isfinite(latest) else None

    def read(self, paths: Sequence[Path], chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Iterator[pd.DataFrame]:
        for path in paths:
            bad: list[pd.DataFrame] = []
            for table in rechunk(self._batches(path, bad=bad), chunk_rows):
                yield self._convert(table)
            if bad:
                yield pd.concat(bad, ignore_index=True)

    def _batches(self, path: Path, include: Sequence[str] | None = None, bad: list[pd.DataFrame] | None = None,
                 tracker: InputTracker | None = None) -> Iterator[pa.RecordBatch]:
        def on_invalid(row: pacsv.InvalidRow) -> str:
            if bad is not None:
                bad.append(reject_rows([malformed_reason("CSV", row)], self.name, raw=[row.text],
                                       source_file=[str(path)]))
            return "skip"

        columns = list(include) if include else [*REQUIRED, *OPTIONAL]
        with (tracker or self.tracker).open_binary(path) as stream:
            csv = pacsv.open_csv(
                stream, read_options=pacsv.ReadOptions(block_size=4 << 20),
                parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in columns},
                                                     strings_can_be_null=False))
            require_columns(path, self.name, csv.schema.names, REQUIRED)
            for batch in csv:
                yield batch.select([c for c in columns if c in batch.schema.names])

    def _convert(self, t: pa.Table) -> pd.DataFrame:
        num = {}
        checks = []
        for col in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", *_TIMES):
            num[col], bad = to_float(t[col])
            checks.append((bad, f"unparseable {col}"))
        phase = pc.utf8_trim_whitespace(t["pod_phase"]).to_pandas()
        state = phase.map(_PHASES).astype("string")
        ended = state.isin(["COMPLETED", "FAILED"]).to_numpy()
        milli = num["gpu_milli"]
        spec = t["gpu_spec"].to_pandas() if "gpu_spec" in t.column_names else None
        frame = pd.DataFrame({
            "job_id": t["name"].to_pandas(),
            "tier": t["qos"].to_pandas(),
            "num_gpus": num["num_gpu"],
            "gpu_milli": np.where((num["num_gpu"] > 0) & (milli > 0), milli, np.nan),
            "gpu_type": spec,
            "cpus": num["cpu_milli"] / 1000.0,
            "mem_mib": num["memory_mib"],
            "submit_ts": TRACE_EPOCH_TS + num["creation_time"],
            "start_ts": TRACE_EPOCH_TS + num["scheduled_time"],
            "end_ts": np.where(ended, TRACE_EPOCH_TS + num["deletion_time"], np.nan),
            # keep the phase text when it is unknown, so validate names it ("unknown state")
            "state": state.fillna(phase.str.upper()),
            "deletion_ts": TRACE_EPOCH_TS + num["deletion_time"],
            "source": self.name,
        })
        frame[READER_REJECT] = first_reason(len(frame), checks)
        return frame
