"""Functional coverage: which declared situations a run reached (``radixkv_spec.situations``).

A ``Probe`` watches one run of a machine: when a step is logged it takes the spec model's
view, and when the step is over (the next step is logged, or the rule's invariants run) it
takes the view again and counts every situation the transition reached. Only the spec
model is read, never the cache under test. ``Coverage`` is what a whole check reached and
what it leaves unreached; the report prints it and ``radixkv check`` exits 3 when a run held
every invariant but left a declared situation unreached (unless accepted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from radixkv_spec.situations import (
    BY_NAME,
    Situation,
    Transition,
    View,
    ends_mid_path,
    reached,
    view_of,
)
from radixkv_spec.tokens import Position

from radixkv_conformance.trace import Step


class Probe:
    """The situations one run reaches, step by step."""

    def __init__(
        self,
        page_size: int,
        watched: Sequence[Situation],
        counts: Counter[str],
        pairs: Counter[str] | None = None,
    ):
        self.page_size = page_size
        self.watched = watched
        self.counts = counts
        self.pairs: Counter[str] = Counter() if pairs is None else pairs  # "op>op": the tally
        self.seen: set[str] = set()  # reached in this run
        self.seen_pairs: set[str] = set()  # operation pairs of this run
        self.last_op = "start"
        self.splits: set[Position] = set()
        self._open: tuple[Step, View] | None = None
        self.handle: Position | None = None
        self.handle_evicted = False

    def __deepcopy__(self, memo: dict[int, Any]) -> Probe:
        """A copy of a run (the state explorer forks runs) counts into the same tally."""
        copy = Probe(self.page_size, self.watched, self.counts, self.pairs)
        copy.seen, copy.splits = set(self.seen), set(self.splits)
        copy.seen_pairs, copy.last_op = set(self.seen_pairs), self.last_op
        copy._open, copy.handle = deepcopy(self._open, memo), self.handle
        copy.handle_evicted = self.handle_evicted
        return copy

    def __eq__(self, other: object) -> bool:
        """Two runs' probes are alike when what they count next is alike: the operation
        pairs a run has gone through only steer the search (the sequence explorer's no-op
        test compares machines with this)."""
        if not isinstance(other, Probe):
            return NotImplemented
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _compared(self) -> tuple[Any, ...]:
        return (
            self.page_size,
            self.watched,
            self.seen,
            self.splits,
            self._open,
            self.handle,
            self.handle_evicted,
        )

    def open(self, step: Step, model: Any, before: View | None = None) -> None:
        """A step starts: the model's view before it (``before``, where the caller has it:
        the view ``close`` just took of the same model)."""
        pair = f"{self.last_op}>{step['op']}"
        self.pairs[pair] += 1
        self.seen_pairs.add(pair)
        self.last_op = step["op"]
        watched = self.watched and "bad" not in step
        self._open = (step, view_of(model) if before is None else before) if watched else None
        self.handle, self.handle_evicted = None, False

    def close(self, model: Any) -> View | None:
        """The open step is over: count what it reached; the model's view after it."""
        if self._open is None:
            return None
        step, before = self._open
        self._open = None
        after = view_of(model)
        transition = Transition(
            op=step["op"],
            before=before,
            after=after,
            page_size=self.page_size,
            namespace=step.get("namespace"),
            tokens=tuple(step.get("tokens", ())),
            rejected=bool(step.get("expect", {}).get("rejected")),
            handle=self.handle,
            handle_evicted=self.handle_evicted,
            splits=frozenset(self.splits),
            amount=int(step.get("num_tokens", 0)),
        )
        for name in reached(transition, self.watched):
            self.counts[name] += 1
            self.seen.add(name)
        split = ends_mid_path(transition) if transition.op in ("match", "insert") else None
        if split is not None:
            self.splits.add(split)
        return after

    def rarity(self) -> float:
        """How rare this run's situations are so far: the search's target (``teardown``)."""
        return sum(1.0 / (1 + self.counts[name]) for name in self.seen)

    def pair_rarity(self) -> float:
        """How rare this run's pairs of consecutive operations are (an insert right after
        an eviction, a reset after a lock, ...): what no situation names, steered to too."""
        return sum(1.0 / (1 + self.pairs[pair]) for pair in self.seen_pairs)


@dataclass
class Coverage:
    """Each declared situation with how often the check reached it."""

    declared: tuple[Situation, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)
    accepted: frozenset[str] = frozenset()  # --uncovered-ok: left unreached knowingly

    @property
    def unreached(self) -> list[str]:
        return [s.name for s in self.declared if not self.counts[s.name]]

    @property
    def missing(self) -> list[str]:
        """Unreached and not accepted: what makes a run incomplete."""
        return [name for name in self.unreached if name not in self.accepted]

    @property
    def complete(self) -> bool:
        return not self.missing

    def lines(self) -> list[str]:
        out = []
        for s in self.declared:
            n = self.counts[s.name]
            mark = (
                ""
                if n
                else (
                    "  (accepted: --uncovered-ok)" if s.name in self.accepted else "  NEVER REACHED"
                )
            )
            out.append(f"    situation {s.name:<34} {n:>7}{mark}")
        return out


def check_names(names: Iterable[str]) -> frozenset[str]:
    """``--uncovered-ok`` names, each a known situation (else a ``LookupError``)."""
    chosen = frozenset(names)
    bad = sorted(chosen - set(BY_NAME))
    if bad:
        raise LookupError(
            f"--uncovered-ok: unknown situation(s) {bad}; known: {', '.join(sorted(BY_NAME))}"
        )
    return chosen
