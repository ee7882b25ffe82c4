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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from copy import copy, deepcopy
from dataclasses import dataclass, field
from typing import Any

from radixkv_spec.cross import DECISIVE, NEAR, START, Decisive, Recencies, Since, outcome, pair
from radixkv_spec.cross import after as since_after
from radixkv_spec.cross import reached as decisive_reached
from radixkv_spec.situations import (
    BY_NAME,
    Situation,
    Transition,
    View,
    reached,
    view_of,
)
from radixkv_spec.tokens import Position

from radixkv_conformance.trace import Step


class Probe:
    """The situations one run reaches, step by step, and its cross coverage
    (``radixkv_spec.cross``): each two consecutive outcomes, counted as ``pair:A > B``, and
    the decisive situations, counted by name, in the same tally as the situations."""

    def __init__(
        self,
        page_size: int,
        watched: Sequence[Situation],
        counts: Counter[str],
        decisive: tuple[Decisive, ...] = DECISIVE,
    ):
        self.page_size = page_size
        self.watched = watched
        self.decisive = decisive
        self.counts = counts  # the session's tally: situations, decisive ones, pairs
        self.seen: set[str] = set()  # situations and decisive ones reached in this run
        self.seen_pairs: set[str] = set()  # outcome pairs of this run
        self.last = START  # the outcome of the run's last step
        self.since = Since()
        self.splits: set[Position] = set()
        self._open: tuple[Step, View, Recencies] | None = None
        self._bad: str | None = None  # the open step is a bad call of this operation
        self.handle: Position | None = None
        self.handle_evicted = False
        self.quiet = False  # steps logged now repeat the open one: not looked at (``repeats``)

    def __deepcopy__(self, memo: dict[int, Any]) -> Probe:
        """A copy of a run (the state explorer forks runs) counts into the same tally."""
        copied = copy(self)  # it shares the tally and what it watches; the rest is frozen
        copied.seen, copied.splits = set(self.seen), set(self.splits)
        copied.seen_pairs = set(self.seen_pairs)
        copied._open = deepcopy(self._open, memo)
        return copied

    def __eq__(self, other: object) -> bool:
        """Two runs' probes are alike when what they count next is alike: the outcome pairs
        a run has gone through only steer the search (the sequence explorer's no-op test
        compares machines with this)."""
        if not isinstance(other, Probe):
            return NotImplemented
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _compared(self) -> tuple[Any, ...]:
        return (
            self.page_size,
            self.watched,
            self.seen,
            self.since,
            self.splits,
            self._open,
            self._bad,
            self.handle,
            self.handle_evicted,
        )

    @contextmanager
    def repeats(self) -> Iterator[None]:
        """The steps logged inside are repeats of the open step, on a state they do not
        change (a match of the same key, again): they reach what it reached, so they are
        not looked at, and the open step closes after the last of them."""
        self.quiet = True
        try:
            yield
        finally:
            self.quiet = False

    def open(self, step: Step, model: Any, before: View | None = None) -> None:
        """A step starts: the model's view before it (``before``, where the caller has it:
        the view ``close`` just took of the same model)."""
        if self.quiet:
            return
        self.handle, self.handle_evicted = None, False
        if "bad" in step:  # a bad call: its outcome is that; no view, no situation
            self._open, self._bad = None, step["op"]
            return
        # the recency an eviction's decisive situations compare with: the model's, now
        recency = dict(model.recency) if step["op"] == "evict" else {}
        self._open = (step, view_of(model) if before is None else before, recency)

    def close(self, model: Any) -> View | None:
        """The open step is over: count what it reached; the model's view after it."""
        if self.quiet:
            return None
        if self._bad is not None:
            self._count_pair(f"{self._bad}:bad")
            self._bad = None
        if self._open is None:
            return None
        step, before, recency = self._open
        self._open = None
        after = view_of(model)
        transition = self._transition(step, before, after)
        for name in reached(transition, self.watched):
            self._reach(name)
        for name in decisive_reached(transition, self.since, recency, self.decisive):
            self._reach(name)
        self._count_pair(outcome(transition))
        self.since = since_after(transition, self.since, getattr(model, "recency", {}))
        split = transition.mid_path if transition.op in ("match", "insert") else None
        if split is not None:
            self.splits.add(split)
        return after

    def _transition(self, step: Step, before: View, after: View) -> Transition:
        expect = step.get("expect", {})
        found = len(expect["indices"]) if "indices" in expect else None
        return Transition(
            op=step["op"],
            before=before,
            after=after,
            page_size=self.page_size,
            namespace=step.get("namespace"),
            tokens=tuple(step.get("tokens", ())),
            rejected=bool(expect.get("rejected")),
            handle=self.handle,
            handle_evicted=self.handle_evicted,
            splits=frozenset(self.splits),
            amount=int(step.get("num_tokens", 0)),
            found=found,
        )

    def _reach(self, name: str) -> None:
        self.counts[name] += 1
        self.seen.add(name)

    def _count_pair(self, current: str) -> None:
        name = PAIR + pair(self.last, current)
        self.counts[name] += 1
        self.seen_pairs.add(name)
        self.last = current

    def rarity(self) -> float:
        """How rare this run's situations (decisive ones too) are so far: the search's
        target (``teardown``). A near miss of a decisive situation never reached scores
        too, less than reaching it: the way there."""
        return sum(self._weight(name) for name in self.seen)

    def _weight(self, name: str) -> float:
        if name.startswith(NEAR):
            missed = not self.counts[name[len(NEAR) :]]
            return 0.5 / (1 + self.counts[name]) if missed else 0.0
        return 1.0 / (1 + self.counts[name])

    def pair_rarity(self) -> float:
        """How rare this run's pairs of consecutive outcomes are (an insert that evicted
        right after an eviction that freed nothing, ...): what no situation names, steered
        to too."""
        return sum(1.0 / (1 + self.counts[name]) for name in self.seen_pairs)


PAIR = "pair:"
"""The prefix of an outcome pair's name in the tally (situations have none)."""


@dataclass
class Coverage:
    """Each declared situation with how often the check reached it, and beside them the
    cross coverage: decisive situations and outcome pairs (``radixkv_spec.cross``), which
    steer the search but never make a pass incomplete."""

    declared: tuple[Situation, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)
    accepted: frozenset[str] = frozenset()  # --uncovered-ok: left unreached knowingly
    decisive: tuple[Decisive, ...] = ()

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
        for d in self.decisive:
            n = self.counts[d.name]
            out.append(f"    {d.name:<44} {n:>7}{'' if n else '  never reached'}")
        return out + self.pair_lines()

    def pairs(self) -> Counter[str]:
        """The outcome pairs reached, ``"A > B"``, with their counts."""
        return Counter(
            {name[len(PAIR) :]: n for name, n in self.counts.items() if name.startswith(PAIR) and n}
        )

    def pair_lines(self) -> list[str]:
        """The outcome pairs in two lines: how many of those the outcomes seen could form,
        the rarest, and some never formed (steered to by the searches after the first)."""
        reached = self.pairs()
        if not reached:
            return []
        outcomes = sorted({o for name in reached for o in name.split(" > ")} - {START})
        never = [pair(a, b) for a in outcomes for b in outcomes if pair(a, b) not in reached]
        rarest = sorted(reached.items(), key=lambda item: (item[1], item[0]))[:3]
        shown = ", ".join(f"{name} ({n}x)" for name, n in rarest)
        between = len(reached) - sum(name.startswith(START) for name in reached)
        lines = [
            f"    outcome pairs: {between} of the {len(outcomes) ** 2} the {len(outcomes)} "
            f"outcomes seen can form; rarest: {shown}"
        ]
        if never:
            lines.append(
                f"    never one after the other: {', '.join(never[:4])}"
                + (f" and {len(never) - 4} more" if len(never) > 4 else "")
            )
        return lines


def check_names(names: Iterable[str]) -> frozenset[str]:
    """``--uncovered-ok`` names, each a known situation (else a ``LookupError``)."""
    chosen = frozenset(names)
    bad = sorted(chosen - set(BY_NAME))
    if bad:
        raise LookupError(
            f"--uncovered-ok: unknown situation(s) {bad}; known: {', '.join(sorted(BY_NAME))}"
        )
    return chosen
