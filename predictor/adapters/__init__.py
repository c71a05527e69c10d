"""Cluster adapters: apply Decisions to Kueue/Kubernetes or Slurm."""
