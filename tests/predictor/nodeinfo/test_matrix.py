import dataclasses

import pytest

from predictor.nodeinfo.matrix import render_matrix
from predictor.nodeinfo.topology import MigInstance
from tests.predictor.nodeinfo.topologies import recorded


def _rows(text):
    return [line.split() for line in text.splitlines() if line.startswith("GPU")]


@pytest.mark.parametrize(
    ("name", "row", "expected"),
    [
        ("dgx-a100", 0, ["GPU0", "X", *["NV12"] * 7, "48-63,176-191", "3"]),
        ("dgx-h100", 5, ["GPU5", *["NV18"] * 5, "X", "NV18", "NV18", "56-111,168-223", "1"]),
        ("pcie-4gpu", 2, ["GPU2", "SYS", "SYS", "X", "NODE", "32-63,96-127", "1"]),
        ("dual-socket-8gpu", 1, ["GPU1", "PIX", "X", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS", "0-19,40-59", "0"]),
    ],
)
def test_rows_read_like_nvidia_smi_topo(name, row, expected):
    assert _rows(render_matrix(recorded(name)))[row] == expected


def test_header_and_legend():
    text = render_matrix(recorded("pcie-4gpu"))
    header = text.splitlines()[0].split()
    assert header == ["GPU0", "GPU1", "GPU2", "GPU3", "CPU", "Affinity", "NUMA", "Affinity"]
    for key in ("SYS", "NODE", "PHB", "PXB", "PIX", "NV#"):
        assert f"  {key}" in text
    assert "Legend" not in render_matrix(recorded("pcie-4gpu"), legend=False)


def test_mig_state_is_listed():
    topo = recorded("dgx-a100")
    gpus = list(topo.gpus)
    gpus[3] = dataclasses.replace(gpus[3], mig_enabled=True, mig_instances=(MigInstance("7g.80gb", 81408),))
    text = render_matrix(dataclasses.replace(topo, gpus=tuple(gpus)))
    assert "GPU3: MIG enabled (7g.80gb)" in text
