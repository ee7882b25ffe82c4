"""Replayable traces: the steps of a failing run as language-neutral JSON (FORMAT.md).

``trace_document`` turns the steps a machine logged into a document; ``replay`` drives a
fresh machine through them (no Hypothesis involved), checking every step and invariant
exactly as the search did, and says whether the implementation held.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixkv_conformance.machines import (
    INVARIANTS,
    LockRef,
    NodeRef,
    RadixCacheMachine,
    Step,
    machine_for,
)
from radixkv_conformance.protocol import AdapterFactory
from radixkv_conformance.semantics import SEMANTICS, Semantics

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


def invariant_id(message: str) -> str | None:
    found = re.search(r"\bINV-\d+\b", message)
    return found.group(0) if found else None


def trace_document(
    machine: type[RadixCacheMachine], implementation: str, check: str, message: str
) -> dict[str, Any]:
    """The last run of ``machine`` as a trace document (see FORMAT.md)."""
    steps = machine.last_trace
    return {
        "format": FORMAT,
        "implementation": implementation,
        "semantics": machine.semantics.name,
        "page_size": machine.last_page_size,
        "failure": {
            "check": check,
            "invariant": invariant_id(message),
            "message": message,
            "step": steps[-1]["id"] if steps else None,
        },
        "steps": [encode(step) for step in steps],
    }


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

    @property
    def invariant(self) -> str | None:
        return invariant_id(self.message)


def replay(
    document: dict[str, Any], factory: AdapterFactory, semantics: Semantics | None = None
) -> ReplayResult:
    """Run the trace's steps against ``factory``; ``passed`` is False if any check failed.

    ``semantics`` defaults to the profile the trace names.
    """
    semantics = semantics or SEMANTICS[document["semantics"]]
    machine_cls = machine_for("ReplayMachine", factory, semantics)
    machine = machine_cls()
    nodes: dict[int, NodeRef] = {}
    locks: dict[int, LockRef] = {}
    done = 0
    try:
        machine.setup(document["page_size"])
        for raw in document["steps"]:
            step = decode(raw)
            _run_step(machine, step, nodes, locks)
            done += 1
            for name in INVARIANTS:
                getattr(machine, name)()
    except Exception as error:  # a failed check: the replay reports it
        message = f"{type(error).__name__}: {error}"
        return ReplayResult(False, done, machine_cls.last_check, message)
    return ReplayResult(True, done)


def _run_step(
    m: RadixCacheMachine, step: Step, nodes: dict[int, NodeRef], locks: dict[int, LockRef]
) -> None:
    op, sid = step["op"], step["id"]
    if "bad" in step:
        m.do_bad_call(step["bad"], step)
        return
    handlers: dict[str, Callable[[], object]] = {
        "match": lambda: nodes.__setitem__(
            sid, m.do_match(tuple(step["tokens"]), step["namespace"])
        ),
        "insert": lambda: nodes.__setitem__(
            sid, m.do_insert(tuple(step["tokens"]), step["namespace"], tuple(step["indices"]))
        ),
        "lock": lambda: locks.__setitem__(sid, m.do_lock(nodes[step["node"]])),
        "unlock": lambda: (
            m.do_unlock_without_lock(nodes[step["node"]])
            if step["lock"] is None
            else m.do_unlock(locks[step["lock"]])
        ),
        "page_hashes": lambda: m.do_page_hashes(nodes[step["node"]]),
        "evict": lambda: m.do_evict(step["num_tokens"]),
        "reset": m.do_reset,
    }
    if op not in handlers:
        raise ValueError(f"unknown trace op {op!r}")
    handlers[op]()
