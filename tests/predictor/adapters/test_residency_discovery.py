"""Discovered nodes keep their residency attributes (docs/residency.md): Slurm partitions and
features, Kubernetes region/zone/pool and predictor/ labels, written into the inventory YAML."""

from predictor.adapters.discovery import DiscoveredNode, inventory_document
from predictor.adapters.kueue.discovery import _residency
from predictor.adapters.kueue.manifests import KueueNaming
from predictor.adapters.slurm.discovery import _names
from predictor.capacity.eligibility import node_mask
from predictor.capacity.inventory_sources import inventory_from_mapping
from predictor.capacity.layout import ClusterLayout


def test_slurm_lists_and_kubernetes_labels():
    assert _names("gpu,long,gpu") == ("gpu", "long") and _names("(null)") == ()
    labels = {"topology.kubernetes.io/region": "eu-west", "topology.kubernetes.io/zone": "fra1-a",
              "predictor/pool": "secure", "predictor/sensitive": "true", "predictor/gpu-type": "A100-80GB",
              "kubernetes.io/arch": "amd64"}
    assert _residency(labels, KueueNaming()) == {"region": "eu-west", "site": "fra1-a", "pool": "secure",
                                                 "labels": (("predictor/sensitive", "true"),)}


def test_inventory_document_carries_residency_and_the_masks_read_it():
    nodes = [DiscoveredNode("g1", "A100-80GB", 8, region="eu-west", partitions=("gpu",), features=("sensitive",)),
             DiscoveredNode("g2", "A100-80GB", 8, region="us-east", labels=(("predictor/sensitive", "true"),))]
    doc = inventory_document(nodes)
    assert doc["nodes"][0] == {"name": "g1", "gpu_type": "A100-80GB", "gpus": 8, "nvlink_islands": "none",
                               "region": "eu-west", "partitions": ["gpu"], "features": ["sensitive"]}
    lay = ClusterLayout.of(inventory_from_mapping(doc))
    assert node_mask(lay, "label=sensitive").tolist() == [True, False]
    assert node_mask(lay, "label=predictor/sensitive").tolist() == [False, True]
    assert node_mask(lay, "partition=gpu;region=eu-west").tolist() == [True, False]
