"""Run a capability machine (SWA, Mamba) outside pytest and say what it checked.

``radixkv check`` runs these after the conformance kit's RadixCache, ChunkCache and
RadixTrie runs: the SWA and Mamba machines drive radixkv's own caches only.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from hypothesis import settings as Settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test


@dataclass
class MachineReport:
    name: str
    passed: bool
    seconds: float
    stats: Counter[str]
    failure: str | None = None


def run_machine(
    name: str,
    machine: type[RuleBasedStateMachine],
    stats: Counter[str],
    settings: Settings | None = None,
) -> MachineReport:
    """Run ``machine``, which counts into ``stats``, under ``settings``; never raises."""
    stats.clear()
    started = time.perf_counter()
    try:
        run_state_machine_as_test(machine, settings=settings)
    except Exception as error:  # the report carries the shrunk failure instead
        return MachineReport(name, False, time.perf_counter() - started, Counter(stats), str(error))
    return MachineReport(name, True, time.perf_counter() - started, Counter(stats))


def capability_machines() -> list[tuple[str, type[RuleBasedStateMachine], Counter[str]]]:
    """radixkv's SWA and Mamba machines and their counters, as ``radixkv check`` runs them."""
    from radixkv_conformance.mamba_machine import RadixKVMambaAdapter, mamba_machine_for
    from radixkv_conformance.swa_machine import swa_machine

    swa = swa_machine("SlidingWindowCheck")
    mamba = mamba_machine_for("MambaRadixCacheCheck", RadixKVMambaAdapter)
    return [("RadixCache (SWA)", swa, swa.stats), ("MambaRadixCache", mamba, mamba.stats)]


def render(report: MachineReport) -> str:
    stats = report.stats
    verdict = "ok" if report.passed else "FAILED"
    steps = stats["invariant checks"] - stats["runs"]
    lines = [
        f"{report.name}: {verdict} in {report.seconds:.1f}s — runs {stats['runs']}, "
        f"steps {max(steps, 0)}, invariant checks {stats['invariant checks']}"
    ]
    lines += [f"    {what:<44} {n:>8}" for what, n in sorted(stats.items())]
    if report.failure:
        lines.append(report.failure)
    return "\n".join(lines)
