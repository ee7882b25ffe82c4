"""Findings acknowledged by cause, not by id (``radixkv check --known TRACE.json``).

A finding id names a symptom: three bugs of one cache may all show as ``INV-12:insert``, so
acknowledging the id of one hides the others. A trace names a cause. Given a trace (a vector
file, or a trace the kit wrote), the kit goes on past its finding id as ``--known ID`` does,
and keeps the shortest runs that hit it (``Causes.note``, at most ``KEEP`` per id). After the
exploration and after each search each of them is cut to the steps it needs (``minimize``);
one whose steps are not an acknowledged trace's (``shape``: the same kinds of operations in
the same order, whatever their arguments) is reported as a finding of its own: same symptom, another
cause.

The arguments are left out, and a run of steps of one kind counts once, because a minimized
run keeps the values it was drawn with: one bug reached by two inserts or by three, with keys
of one page or of two, in one namespace or two, is one cause. Two bugs that reach one id
through the same kinds of operations are then one cause too: their traces alone do not tell
them apart.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from radixkv_conformance.minimize import minimize
from radixkv_conformance.profile import Profile
from radixkv_conformance.protocol import AdapterFactory

KEEP = 2
"""The shortest runs kept per acknowledged cause between two comparisons: each costs a
minimization by replay after the search."""

_KIND = ("op", "bad", "spent")  # what a step's cause is read from; its arguments are not


def shape(document: dict[str, Any]) -> Hashable:
    """What two traces of one cause have in common: the finding id, and the operations in
    order, each bad call by its kind (a spent receipt as such), whatever their arguments,
    a run of one kind of step counted once."""
    kinds = [tuple(step.get(key) for key in _KIND) for step in document["steps"]]
    runs = tuple(kind for at, kind in enumerate(kinds) if at == 0 or kinds[at - 1] != kind)
    return document["failure"].get("finding"), runs


def finding_of(document: dict[str, Any], name: str) -> str:
    """The finding id a trace acknowledges (``ValueError`` naming ``name`` if it has none)."""
    fid = document.get("failure", {}).get("finding")
    if not isinstance(fid, str):
        raise ValueError(f"--known {name}: a trace with no finding id (FORMAT.md 'failure')")
    return fid


@dataclass
class Causes:
    """The acknowledged traces, by finding id, and the runs that hit their ids since the
    last comparison."""

    shapes: dict[str, set[Hashable]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # finding id -> a trace's name
    hits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def acknowledge(self, document: dict[str, Any], name: str) -> str:
        """Acknowledge ``document``'s cause; its finding id is returned."""
        fid = finding_of(document, name)
        self.shapes.setdefault(fid, set()).add(shape(document))
        self.names.setdefault(fid, name)
        return fid

    def wants(self, fid: str, steps: int) -> bool:
        """Whether a run that hit ``fid`` after ``steps`` steps is among the shortest."""
        kept = self.hits.get(fid, [])
        return fid in self.shapes and (
            len(kept) < KEEP or steps < max(len(d["steps"]) for d in kept)
        )

    def note(self, fid: str, document: dict[str, Any]) -> None:
        """Keep a run's trace up to its hit of ``fid``, if it is among the ``KEEP`` shortest."""
        kept = self.hits.setdefault(fid, [])
        kept.append(document)
        kept.sort(key=lambda d: len(d["steps"]))
        del kept[KEEP:]

    def others(
        self, factory: AdapterFactory, profile: Profile, known: Iterable[str]
    ) -> list[dict[str, Any]]:
        """The traces of the runs kept since the last call, cut to the steps they need,
        whose cause is none acknowledged (each reported once); the kept runs are cleared."""
        found = []
        for fid, documents in sorted(self.hits.items()):
            others = [k for k in known if k != fid]
            for document in documents:
                small = minimize(document, factory, profile, others)
                if small is document:  # it does not fail that way alone: nothing to judge
                    continue
                if (seen := shape(small)) not in self.shapes[fid]:
                    self.shapes[fid].add(seen)
                    found.append(small)
        self.hits.clear()
        return found
