"""The workload driver: radixkv replay, its plots and policies, and the benchmark scripts run
small."""
