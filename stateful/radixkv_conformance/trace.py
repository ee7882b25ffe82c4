"""Replayable traces: the steps of a failing run as language-neutral JSON (FORMAT.md).

``trace_document`` turns the steps a machine logged into a document; ``replay`` drives a
fresh machine through them (no Hypothesis involved), checking every step and invariant
exactly as the search did, and says whether the implementation held.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis.errors import UnsatisfiedAssumption

from radixkv_conformance.findings import Finding, invariant_id
from radixkv_conformance.profile import PROFILES, Profile
from radixkv_conformance.protocol import AdapterFactory

if TYPE_CHECKING:
    from radixkv_conformance.machines import ConformanceMachine, LockRef, NodeRef

FORMAT = "radixkv-trace/1"


def encode(value: Any) -> Any:
    """A plain value as JSON: tuples and bytes are tagged (``$tuple``, ``$bytes``)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return bytes.fromhex(value["$bytes"])
        if set(value) == {"$tuple"}:
            return tuple(decode(v) for v in value["$tuple"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def trace_document(
    machine: ConformanceMachine, check: str, message: str, finding: str
) -> dict[str, Any]:
    """The steps ``machine`` ran so far, as a trace document (see FORMAT.md)."""
    steps = machine.trace
    document: dict[str, Any] = {
        "format": FORMAT,
        "implementation": machine.session.name,
        "semantics": machine.session.profile.name,
        "mode": machine.mode,
        "page_size": machine.page_size,
    }
    if machine.window is not None:
        document["sliding_window"] = machine.window
    document["failure"] = {
        "check": check,
        "invariant": invariant_id(message),
        "finding": finding,
        "message": message,
        "step": steps[-1]["id"] if steps else None,
    }
    if machine.session.known:  # the run went on past these: its replay must too
        document["known"] = sorted(machine.session.known)
    document["steps"] = [encode(step) for step in steps]
    return document


def dumps(document: dict[str, Any]) -> str:
    """The document as JSON: the header indented, one step per line."""
    header = {k: v for k, v in document.items() if k != "steps"}
    head = json.dumps(header, indent=1)[:-2]
    steps = ",\n  ".join(json.dumps(step) for step in document["steps"])
    return f'{head},\n "steps": [\n  {steps}\n ]\n}}\n'


def write(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(document))


def load(path: Path | str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(Path(path).read_text())
    if document.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} trace")
    return document


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
    name = document["semantics"]
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
    on past ends the replay there, as passed.
    """
    from radixkv_conformance.machines import machine_for

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
    rules: Any = m  # each mode's rule set has its own do_match / do_insert / do_evict
    if "bad" in step:
        m.do_bad_call(step["bad"], step)
        return
    keywords = {k: step[k] for k in _MODE_FIELDS.get((m.mode, op), ()) if k in step}
    if op == "match":
        found = rules.do_match(tuple(step["tokens"]), step["namespace"])
        nodes[sid] = found[1] if isinstance(found, tuple) else found
    elif op == "insert":
        tokens, ns, indices = tuple(step["tokens"]), step["namespace"], tuple(step["indices"])
        nodes[sid] = rules.do_insert(tokens, ns, indices, **keywords)
    elif op == "lock":
        locks[sid] = m.do_lock(nodes[step["node"]])
    elif op == "unlock":
        _unlock(m, step, nodes, locks)
    elif op == "page_hashes":
        rules.do_page_hashes(nodes[step["node"]])
    elif op == "evict":
        rules.do_evict(step["num_tokens"], **keywords)
    elif op == "reset":
        m.do_reset()
    elif op == "free_slot":
        rules.do_free_slot(step["slot"])
    else:
        raise ValueError(f"unknown trace op {op!r}")


_MODE_FIELDS = {
    ("plain", "insert"): ("priority",),
    ("swa", "insert"): ("prev_prefix_len", "swa_evicted_seqlen"),
    ("swa", "evict"): ("swa_num_tokens",),
    ("mamba", "insert"): ("state_slot",),
    ("mamba", "evict"): ("mamba_slots",),
}


def _unlock(
    m: ConformanceMachine,
    step: dict[str, Any],
    nodes: dict[int, NodeRef],
    locks: dict[int, LockRef],
) -> None:
    if step["lock"] is None:
        m.do_unlock_without_lock(nodes[step["node"]])
        return
    m.unlock_by_token = not step.get("without_token", False)
    m.do_unlock(locks[step["lock"]])
