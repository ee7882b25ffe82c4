"""A level of the breadth-first exploration on several cores (``--jobs N``).

The parent process keeps everything that decides the outcome: the visited set, the counts,
the findings, and the order in which successors are taken, which is the order one process
takes them in. Each worker rebuilds a state of the level from its path, runs every step
from it and judges each successor (``_Breadth.successors``: a finding, a state past the
lock bound, or a state and its canonical key). So the states found, the findings and their
shortest traces are the same for every number of workers; only a time budget, which ends a
level wherever the clock says, can stop one run earlier than another (the floor's levels
are always whole).

Workers are forked from the parent once the machine class exists: they share its adapter
factory and profile without pickling them (a factory may be a local function, a machine
class is made at run time). Where the platform cannot fork, or this process holds a CUDA
context a forked child could not use, the exploration runs in one process and says so.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from radixkv_conformance.explore.driver import State

if TYPE_CHECKING:
    from radixkv_conformance.explore.states import Successor, _Breadth

Task = tuple[tuple[tuple[str, tuple[int, ...]], ...], tuple[tuple[str, Any], ...], list[Any]]
"""A state to expand, as a worker gets it: its path, its start variant, its steps."""


def can_fork() -> bool:
    return why_not_fork() is None


def why_not_fork() -> str | None:
    """Why workers cannot be forked here, if they cannot: the platform has no ``fork``, or
    the checker already holds a CUDA context (a forked child cannot use it, and the
    engine's error would read as a finding)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return "this platform cannot fork"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialized in this process, and a forked worker cannot use it"
    return None


@dataclass
class Counted:
    """What a worker's steps added to the session's tallies (they live in the parent)."""

    coverage: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    notes: list[str] = field(default_factory=list)
    fork: str = "copy"


_EXPLORER: _Breadth | None = None
"""The explorer the workers were forked with (each worker has its own copy of it)."""


class Workers:
    """A pool of ``jobs`` forked workers that expand the levels of one exploration."""

    def __init__(self, explorer: _Breadth, jobs: int) -> None:
        global _EXPLORER
        _EXPLORER = explorer  # what the forked workers will hold
        self.explorer, self.jobs = explorer, jobs
        self.pool = multiprocessing.get_context("fork").Pool(jobs)

    def expand(self, level: list[State], depth: int) -> Iterator[list[Successor]]:
        """Each state's successors, in the order of ``level``, as ``_Breadth._expand``."""
        tasks = [(state.path, state.variant, state.steps) for state in level]
        chunk = max(1, min(16, len(tasks) // (4 * self.jobs)))
        for successors, counted in self.pool.imap(_successors, tasks, chunksize=chunk):
            self._add(counted)
            yield successors

    def _add(self, counted: Counted) -> None:
        coverage, stats = tallies(self.explorer.driver.machine_cls)
        coverage.update(counted.coverage)
        stats.update(counted.stats)
        self.explorer.report.acknowledged += counted.acknowledged
        for note in counted.notes:
            if note not in self.explorer.states.notes:
                self.explorer.states.notes.append(note)
        if counted.fork == "rerun":
            self.explorer.states.fork = "rerun"

    def close(self) -> None:
        self.pool.terminate()  # at the end, or at a spent budget with tasks in flight
        self.pool.join()


def _successors(task: Task) -> tuple[list[Successor], Counted]:
    """In a worker: the state ``task`` names, rebuilt, and every step from it judged."""
    explorer = _EXPLORER
    assert explorer is not None, "a worker forked without its explorer"
    path, variant, steps = task
    state = explorer.rebuild(State(None, {}, (), path, variant))
    state.steps = steps
    coverage, stats = tallies(explorer.driver.machine_cls)
    coverage_before, stats_before = Counter(coverage), Counter(stats)
    acknowledged, notes = explorer.report.acknowledged, len(explorer.states.notes)
    successors = list(explorer.successors(state))
    counted = Counted(
        coverage - coverage_before,
        stats - stats_before,
        explorer.report.acknowledged - acknowledged,
        explorer.states.notes[notes:],
        explorer.states.fork,
    )
    return [_light(successor) for successor in successors], counted


def _light(successor: Successor) -> Successor:
    """A successor as it travels back: its state as a path (the parent hands it to a
    worker again, which rebuilds it), no machine."""
    child = successor.state
    if child is None:
        return successor
    return dataclasses.replace(
        successor, state=State(None, {}, child.seen, child.path, child.variant)
    )


def tallies(machine_cls: type[Any]) -> tuple[Counter[str], Counter[str]]:
    """The session's coverage and stats counters (a kit machine's; any other machine
    class counts nothing: two empty counters)."""
    session = getattr(machine_cls, "session", None)
    if session is None:
        return Counter(), Counter()
    return session.coverage, session.stats
