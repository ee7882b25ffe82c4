"""The workload driver: radixkv drive, its plots and policies, and the benchmark scripts run
small."""
