"""Run a machine outside pytest and say what was checked (the ``radixkv check`` command)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from stateful.machines import RadixCacheMachine


@dataclass
class MachineReport:
    name: str
    passed: bool
    seconds: float
    stats: Counter[str]
    failure: str | None = None


def run_machine(
    name: str, machine: type[RadixCacheMachine], settings: Settings | None = None
) -> MachineReport:
    """Run ``machine`` under ``settings`` (default: the loaded profile); never raises."""
    machine.stats.clear()
    started = time.perf_counter()
    try:
        run_state_machine_as_test(machine, settings=settings)
    except Exception as error:  # the report carries the shrunk failure instead
        return MachineReport(
            name, False, time.perf_counter() - started, Counter(machine.stats), str(error)
        )
    return MachineReport(name, True, time.perf_counter() - started, Counter(machine.stats))
