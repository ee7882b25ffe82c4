"""The seeded workload and the replay driver (correctness only; speed is benchmarks/)."""

from __future__ import annotations

from radixkv.driver.drive import replay
from radixkv.driver.workload import KINDS, WorkloadConfig, generate, trace_digest


def test_same_seed_same_trace() -> None:
    cfg = WorkloadConfig(seed=3, requests=40, prompt_len=128)
    assert trace_digest(cfg) == trace_digest(cfg)
    assert trace_digest(cfg) != trace_digest(WorkloadConfig(seed=4, requests=40, prompt_len=128))
    kinds = {r.kind for r in generate(WorkloadConfig(seed=3, requests=400, prompt_len=64))}
    assert kinds == set(KINDS)


def test_replay_returns_every_index_and_is_deterministic() -> None:
    cfg = WorkloadConfig(seed=1, requests=60, prompt_len=128)
    for page_size in (1, 4):
        first = replay("radixkv", generate(cfg), page_size=page_size, pool_size=128 * 12)
        again = replay("radixkv", generate(cfg), page_size=page_size, pool_size=128 * 12)
        assert first.requests == 60
        assert first.tokens["evict"] > 0  # the pool forced eviction
        assert first.prefix_digest == again.prefix_digest
        assert 0 < first.hit_rate() < 1
