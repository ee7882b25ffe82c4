"""A conformance session and the records of its runs: what a machine class checks
(``Session``), the handles and lock receipts a run holds (``NodeRef``, ``LockRef``), and the
two ways a run ends without a finding (``end_run``; a step no caller makes, ``IllegalStep``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from hypothesis.errors import UnsatisfiedAssumption
from radixkv_spec.cross import Decisive
from radixkv_spec.situations import Situation

from radixkv_conformance.profile import RADIXKV, Profile
from radixkv_conformance.protocol import AdapterError, AdapterFactory, Namespace

if TYPE_CHECKING:
    from radixkv_conformance.causes import Causes

Keywords = dict[str, Any]  # a call's keywords beyond the key and its indices


@dataclass
class Session:
    """What one conformance session checks, and what its runs counted together.

    A machine class carries one session (``machine_for``); every run of that class is a
    fresh machine instance with its own state, counting into the session's ``stats``.
    """

    factory: AdapterFactory
    profile: Profile = RADIXKV
    capabilities: frozenset[str] = frozenset()
    known: frozenset[str] = frozenset()
    stats: Counter[str] = field(default_factory=Counter)
    progress: Callable[[Counter[str]], None] | None = None
    name: str = "cache"
    situations: tuple[Situation, ...] = ()  # what the runs must reach (coverage.py)
    coverage: Counter[str] = field(default_factory=Counter)  # situations, outcome pairs
    decisive: tuple[Decisive, ...] = ()  # the decisive situations the runs watch (cross.py)
    steer: bool = False  # favour runs that reach rare situations (searches after the first)
    causes: Causes | None = None  # findings acknowledged by their trace (causes.py)


class IllegalStep(Exception):
    """A trace step no correct caller makes at that point (a replayed trace cut by hand or
    by a minimizer that deleted what made it legal): not a finding of the cache."""


class RunEnded(UnsatisfiedAssumption):
    """The kit ends this run as one that proves nothing (``end_run``). Hypothesis drops it
    as it drops a ``reject()``; the kit tells the two apart: an adapter that rejects a run
    itself has it dropped uncounted, which is a usage error (``adapter_rejected``)."""


def end_run() -> NoReturn:
    """End this run as one that proves nothing (a known finding it cannot go past): inside
    a search Hypothesis drops it, as a ``reject()``; a trace replay or a minimization stops
    there, as passed up to this step."""
    raise RunEnded("the kit ended this run")


def adapter_rejected(error: UnsatisfiedAssumption) -> AdapterError:
    """An adapter ended a run with ``hypothesis.reject()`` (or ``assume``): Hypothesis would
    drop it silently, uncounted, and a pass would claim what those runs never showed."""
    return AdapterError(
        "the adapter ended a run with hypothesis.reject() or assume(): raise "
        "radixkv_conformance.NotAdmitted where the engine's scheduler would not take the "
        "step (the run ends there and is counted), or NoRoom where a pool that declares "
        f"'capacity' cannot hold an insert (judged by INV-15) ({error!r})"
    )


@dataclass(frozen=True)
class NodeRef:
    """A handle the cache returned, the position it ends at, and when it was taken."""

    handle: Any
    namespace: Namespace
    prefix: tuple[int, ...]
    born: int  # the mode's clock when the handle was taken
    resets: int  # how many resets had happened then
    step: int  # the trace step that returned it


@dataclass(frozen=True)
class LockRef:
    node: NodeRef
    token: Any
    step: int
    refused: bool = False  # the cache (rightly) rejected the lock: nothing to undo
