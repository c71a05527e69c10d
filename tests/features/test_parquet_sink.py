import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from features.parquet_sink import ParquetSink
from features.schema import conform, empty_jobs


def _frame(**extras) -> pd.DataFrame:
    frame = conform(pd.DataFrame([{"job_id": "a", "submit_ts": 1.0, "state": "COMPLETED"}]))
    for name, value in extras.items():
        frame[name] = [value]
    return frame


def test_one_part_keeps_canonical_types(tmp_path):
    sink = ParquetSink(tmp_path / "jobs", conform(empty_jobs()))
    sink.write(_frame())
    sink.write(_frame())
    sink.finish(tmp_path / "out.parquet")
    schema = pq.read_schema(tmp_path / "out.parquet")
    assert schema.field("job_id").type == pa.string() and schema.field("censored").type == pa.bool_()
    assert pq.ParquetFile(tmp_path / "out.parquet").metadata.num_row_groups == 2
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_extras_that_come_and_go_and_change_type_are_unified(tmp_path):
    sink = ParquetSink(tmp_path / "rejects", conform(empty_jobs()))
    sink.write(_frame(raw="1|x", line=3))
    sink.write(_frame())  # no extras: filled with nulls in the open part
    sink.write(_frame(line="four", other=1.5))  # a new column and a new type: new part, merged at the end
    sink.write(_frame(line=2.5))
    sink.finish(tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.field("line").type == pa.string()  # int vs text: text
    assert table.column("line").to_pylist() == ["3", None, "four", "2.5"]
    assert table.column("raw").to_pylist() == ["1|x", None, None, None]
    assert table.column("other").to_pylist() == [None, None, 1.5, None]


def test_nothing_written_gives_the_template_schema(tmp_path):
    sink = ParquetSink(tmp_path / "jobs", conform(empty_jobs()))
    sink.write(conform(empty_jobs()))
    sink.finish(tmp_path / "out.parquet")
    read = pd.read_parquet(tmp_path / "out.parquet")
    assert read.empty and list(read.columns) == list(conform(empty_jobs()).columns)
