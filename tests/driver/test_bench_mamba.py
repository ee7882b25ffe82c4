"""benchmarks/bench_mamba.py's replay, radixkv alone on one tiny configuration: it must
hand every KV index and state slot back, hit a part of the prompts and replay the same way
twice (pymllm, the peer, is not needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mamba.py"


def load() -> ModuleType:
    """The script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_mamba", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_mamba", module)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_replay_frees_everything_hits_and_repeats() -> None:
    bench_mamba = load()
    cfg = bench_mamba.MambaConfig(requests=40, prompt_len=256, page_size=1, slots=6)
    first = bench_mamba.replay(cfg, "radixkv", 0)  # raises if an index or slot is lost
    again = bench_mamba.replay(cfg, "radixkv", 0)
    assert first.requests == 40 and len(first.prefix_lens) == 40
    assert 0 < first.hit_rate < 1
    assert first.hit_rate <= first.kv_hit_rate <= 1  # a match never passes the KV
    assert first.evict_calls > 0  # the pools were small enough to force eviction
    assert first.exist_disagrees == 0  # radixkv's mamba_exist means "not adopted"
    assert first.digest == again.digest
