"""Replaying a trace (FORMAT.md): a fresh machine driven through its steps, no Hypothesis
involved, checking every step and invariant exactly as the search did, and saying whether
the implementation held."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis.errors import UnsatisfiedAssumption

from radixkv_conformance.findings import Finding, invariant_id
from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.profile import PROFILES, Profile
from radixkv_conformance.protocol import AdapterFactory
from radixkv_conformance.registry import machine_for
from radixkv_conformance.session import LockRef, NodeRef
from radixkv_conformance.trace import decode, upgraded


@dataclass
class ReplayResult:
    passed: bool
    steps: int
    check: str = ""
    message: str = ""
    finding: str = ""
    acknowledged: tuple[str, ...] = ()  # the known ids it went on past, one per hit
    trace: dict[str, Any] | None = None  # a failing replay's own document of its steps

    @property
    def invariant(self) -> str | None:
        return invariant_id(self.message)


def profile_of(document: dict[str, Any]) -> Profile:
    """The built-in profile a trace names (a profile of another module must be passed)."""
    name = upgraded(document)["profile"]
    if name not in PROFILES:
        raise ValueError(
            f"the trace names profile {name!r}, which is not built in ({sorted(PROFILES)}): "
            "pass the profile (radixkv check --replay TRACE MODULE:FACTORY reads the "
            "module's PROFILE)"
        )
    return PROFILES[name]


def replay(
    document: dict[str, Any],
    factory: AdapterFactory,
    profile: Profile | None = None,
    known: Iterable[str] | None = None,
) -> ReplayResult:
    """Run the trace's steps against ``factory``; ``passed`` is False if any check failed.

    ``profile`` defaults to the built-in profile the trace names; ``known`` to the ids
    the trace lists under ``known``. Known ids are acknowledged as in a search: each hit
    is recorded (``acknowledged``) and the replay goes on past it; one the step cannot go
    on past ends the replay there, as passed. A step no correct caller could make there
    raises ``IllegalStep`` (the trace is at fault, not the cache).
    """

    chosen = profile or profile_of(document)
    acknowledged = frozenset(document.get("known", ()) if known is None else known)
    machine_cls = machine_for("ReplayMachine", factory, chosen, known=acknowledged)
    machine = machine_cls()
    nodes: dict[int, NodeRef] = {}
    locks: dict[int, LockRef] = {}
    done = 0
    try:
        machine.setup(document["page_size"], document.get("sliding_window"))
        for raw in document["steps"]:
            _run_step(machine, decode(raw), nodes, locks)
            machine.check_invariants_now()  # failing here, it failed after this step (FORMAT.md)
            done += 1
    except Finding as finding:  # a failed check: the replay reports it
        hits = _hits(machine)
        return ReplayResult(
            False, done, finding.check, finding.message, finding.finding_id, hits, finding.trace
        )
    except UnsatisfiedAssumption:  # a known finding it cannot go on past
        return ReplayResult(True, done, acknowledged=_hits(machine))
    return ReplayResult(True, done, acknowledged=_hits(machine))


def _hits(machine: ConformanceMachine) -> tuple[str, ...]:
    return tuple(fid for _, fid in getattr(machine, "acknowledged", ()))


def _run_step(
    m: ConformanceMachine,
    step: dict[str, Any],
    nodes: dict[int, NodeRef],
    locks: dict[int, LockRef],
) -> None:
    op, sid = step["op"], step["id"]
    if "bad" in step:
        m.do_bad_call(step["bad"], step)
        return
    names = (*m.insert_keywords, "priority", *m.evict_keywords)  # the mode's keywords of a call
    keywords = {k: step[k] for k in names if k in step}
    if op == "match":
        nodes[sid] = m.do_match(tuple(step["tokens"]), step["namespace"])
    elif op == "insert":
        tokens, ns, indices = tuple(step["tokens"]), step["namespace"], tuple(step["indices"])
        nodes[sid] = m.do_insert(tokens, ns, indices, **keywords)
    elif op == "lock" and "again" in step:
        m.do_lock_again(locks[step["again"]])
    elif op == "lock":
        locks[sid] = m.do_lock(nodes[step["node"]])
    elif op == "unlock":
        _unlock(m, step, nodes, locks)
    elif op == "page_hashes":
        m.do_page_hashes(nodes[step["node"]])
    elif op == "evict":
        m.do_evict(step["num_tokens"], **keywords)
    elif op == "reset":
        m.do_reset()
    elif op == "free_slot":
        m.do_free_slot(step["slot"])
    else:
        raise ValueError(f"unknown trace op {op!r}")


def _unlock(
    m: ConformanceMachine,
    step: dict[str, Any],
    nodes: dict[int, NodeRef],
    locks: dict[int, LockRef],
) -> None:
    if step["lock"] is None:
        m.do_unlock_without_lock(nodes[step["node"]])
        return
    if step.get("spent"):
        m.do_unlock_spent(locks[step["lock"]])
        return
    if step.get("foreign"):
        m.do_unlock_foreign(nodes[step["node"]], locks[step["lock"]])
        return
    m.unlock_by_token = not step.get("without_token", False)
    m.do_unlock(locks[step["lock"]])
