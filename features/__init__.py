"""Job records: the canonical schema, readers for real job-log formats, point-in-time features and
synthetic workloads. Imports nothing else of this project."""
