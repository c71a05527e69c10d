"""GPU type vocabulary: every spelling a scheduler or a log uses reaches the inventory's name."""

from __future__ import annotations

import pytest

from features.errors import InputError
from features.gpu_types import (
    DEFAULT_VOCABULARY,
    KNOWN_GPU_TYPES,
    GpuTypeVocabulary,
    normalise_gpu_name,
    slurm_gres_type,
    split_request,
)

CLUSTER = GpuTypeVocabulary({k: KNOWN_GPU_TYPES[k] for k in ("A10", "L40S", "A100-80GB")})


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("A100-80GB", "A100-80GB"),  # the inventory's own
        ("a100-80gb", "A100-80GB"),  # sacct / gres.conf Type=
        ("gres/gpu:a100-80gb", "A100-80GB"),  # a TRES key
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),  # nvidia.com/gpu.product
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),  # nvidia-smi --query-gpu=name
        ("nvidia-a100-sxm4-40gb", "A100-40GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-H100-NVL", "H100-80GB"),
        ("Tesla-V100-SXM2-32GB", "V100M32"),
        ("Tesla-V100-SXM2-16GB", "V100"),
        ("NVIDIA-L40S", "L40S"),
        ("AMD_Instinct_MI300X", "MI300X"),  # amd.com/gpu.product-name
        ("G2", "G2"),  # openb's anonymised types
    ],
)
def test_spellings_reach_the_canonical_name(name: str, canonical: str) -> None:
    assert DEFAULT_VOCABULARY.canonical_or_none(name) == canonical


def test_a_family_without_a_size_means_every_size_the_vocabulary_has() -> None:
    assert DEFAULT_VOCABULARY.matches("a100") == ("A100-40GB", "A100-80GB")
    assert DEFAULT_VOCABULARY.canonical_or_none("a100") is None  # ambiguous: a reader keeps it as written
    assert CLUSTER.matches("a100") == ("A100-80GB",)  # a cluster with one kind resolves it


def test_a_size_far_from_every_member_matches_nothing() -> None:
    assert DEFAULT_VOCABULARY.matches("a100-120gb") == ()


def test_unknown_names_are_an_error_naming_the_known_types() -> None:
    with pytest.raises(InputError, match=r"unknown GPU type 'tpu-v5'; known types: A10, L40S, A100-80GB"):
        CLUSTER.resolve("tpu-v5")


def test_requests_list_several_types_once_each_in_order() -> None:
    assert split_request("A10|A100-80GB") == split_request("A10, A100-80GB") == ["A10", "A100-80GB"]
    assert CLUSTER.resolve_request("a10|NVIDIA-A100-SXM4-80GB|A10") == ("A10", "A100-80GB")


def test_inventory_aliases_extend_the_vocabulary_and_must_name_a_type() -> None:
    site = GpuTypeVocabulary({"A100-80GB": KNOWN_GPU_TYPES["A100-80GB"]}, {"gpu-big": "A100-80GB"})
    assert site.canonical_or_none("GPU_BIG") == "A100-80GB"
    with pytest.raises(InputError, match="points to unknown type 'H200'"):
        GpuTypeVocabulary({"A100-80GB": KNOWN_GPU_TYPES["A100-80GB"]}, {"x": "H200"})


def test_canonicalise_keeps_what_it_cannot_place() -> None:
    assert DEFAULT_VOCABULARY.canonicalise(["a100-80gb", "a100", "mystery", None, "a10|nvidia-l40s"]) == [
        "A100-80GB", "a100", "mystery", None, "A10|L40S"]


def test_normal_form_and_slurm_name() -> None:
    assert normalise_gpu_name(" NVIDIA_A100-SXM4-80GB ") == "a100-80gb"
    assert slurm_gres_type("A100-80GB") == "a100-80gb"
    assert DEFAULT_VOCABULARY.canonical_or_none(slurm_gres_type("A100-80GB")) == "A100-80GB"  # round trip


def test_an_inventory_node_may_use_any_spelling(tmp_path) -> None:
    from predictor.capacity.inventory_sources import load_inventory

    path = tmp_path / "inv.yaml"
    path.write_text("gpu_types:\n  A100-80GB: {memory_mib: 81920, aliases: [gpu-big]}\n"
                    "nodes:\n  - {name: n1, gpu_type: NVIDIA-A100-SXM4-80GB, gpus: 8}\n"
                    "  - {name: n2, gpu_type: gpu-big, gpus: 8}\n  - {name: n3, gpu_type: nvidia-l40s, gpus: 4}\n")
    inv = load_inventory(path)
    assert [n.gpu_type for n in inv.nodes] == ["A100-80GB", "A100-80GB", "L40S"]
    assert inv.vocabulary.canonical_or_none("GPU-BIG") == "A100-80GB"
