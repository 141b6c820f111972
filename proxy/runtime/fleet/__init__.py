"""The fleet exchange: Redis (standalone, Sentinel, Cluster), the `--workers` parent, and the sync loop."""
