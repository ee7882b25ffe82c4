"""The alphabet of the explorers: the finite set of values each draw of a rule may take.

A draw is named by its label (``"tail"``, ``"namespace"``, ``"num_tokens"`` ...) or by
``"rule.label"``; a domain lists its options together with the symmetry counts each option
leaves (``Seen``): tokens and namespaces are opaque labels to a cache, so a domain offers the
labels a sequence has introduced plus one new one, in first-appearance order, and every
other sequence is a renaming of one that runs. A draw the alphabet does not name takes one
representative value (``driver.representative``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from radixkv_conformance.explore.driver import (
    Seen,
    admits,
    finite_values,
    representative,
)


class Domain(Protocol):
    """The finite values one draw may take, given what the sequence introduced so far."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        """Each allowed value with the ``seen`` that follows from choosing it.

        ``strategy`` is what the rule would have drawn from: a value it cannot produce
        (an integer outside its bounds, an element it does not sample) is never offered.
        """


def _seen_count(seen: Seen, name: str) -> int:
    return dict(seen).get(name, 0)


def _with_count(seen: Seen, name: str, count: int) -> Seen:
    return tuple(sorted({**dict(seen), name: count}.items()))


@dataclass(frozen=True)
class Fixed:
    """Every one of ``values``, no symmetry."""

    values: tuple[Any, ...]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(value, seen) for value in self.values if admits(strategy, value)]


@dataclass(frozen=True)
class Simplest:
    """The strategy's simplest value only, on purpose (not listed as a representative)."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(representative(strategy, "", "simplest"), seen)]


@dataclass(frozen=True)
class Every:
    """Every value the rule's own strategy can produce (a small finite one)."""

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        return [(value, seen) for value in finite_values(strategy)]


@dataclass(frozen=True)
class Labels:
    """Interchangeable labels (namespaces): a new one only in first-appearance order."""

    symmetry: str
    values: tuple[Any, ...]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        used = _seen_count(seen, self.symmetry)
        return [
            (value, _with_count(seen, self.symmetry, max(used, at + 1)))
            for at, value in enumerate(self.values[: used + 1])
        ]


@dataclass(frozen=True)
class TokenLists:
    """Token lists over ``0 .. alphabet-1`` whose length is in ``lengths(page_size)``.

    Tokens are interchangeable labels: a list may use a token never seen before only if it
    is the next unused one, so ``[1]`` never comes before some ``[0]``.
    """

    symmetry: str
    alphabet: int
    lengths: Callable[[int], Sequence[int]]

    def options(self, seen: Seen, machine: Any, strategy: Any) -> Sequence[tuple[Any, Seen]]:
        out: list[tuple[Any, Seen]] = []
        used = _seen_count(seen, self.symmetry)
        for length in self.lengths(machine.page_size):
            for tokens in itertools.product(range(self.alphabet), repeat=length):
                after = _canonical_count(tokens, used)
                if after is not None:
                    out.append((list(tokens), _with_count(seen, self.symmetry, after)))
        return out


def _canonical_count(tokens: Sequence[int], used: int) -> int | None:
    """The count of tokens introduced after ``tokens``, or None if it skips a new one."""
    for token in tokens:
        if token > used:
            return None
        used = max(used, token + 1)
    return used


@dataclass(frozen=True)
class Alphabet:
    """What every draw may take: ``domains`` by ``"rule.label"`` or ``"label"``."""

    name: str
    domains: Mapping[str, Domain]
    left_out: frozenset[str] = frozenset()  # rules not run at all

    def domain(self, rule: str, label: str) -> Domain | None:
        return self.domains.get(f"{rule}.{label}") or self.domains.get(label)


def _up_to(n: int) -> Callable[[int], Sequence[int]]:
    return lambda page_size: range(n + page_size)


NAMESPACES = Labels("namespaces", (None, "a"))
TOKENS = TokenLists("tokens", 2, _up_to(2))  # page 1: up to 2 tokens; page 2: up to 3
WHOLE_KEY: dict[str, Domain] = {"base": Simplest(), "cut": Simplest(), "tail": TOKENS}
"""Every key whole from ``tail``: the machines' ``base`` / ``cut`` (a cut of an earlier key,
to make random keys share prefixes) take their simplest value, the empty key."""

ALPHABET = Alphabet(
    "small",
    {
        "page_size": Fixed((1, 2)),
        "window": Fixed((1, 2)),
        "unlock by token": Fixed((True, False)),
        "namespace": NAMESPACES,
        **WHOLE_KEY,
        "matched first": Fixed((False, True)),
        "swa evicted pages": Fixed((0, 1)),
        "with_slot": Fixed((False, True)),
        "snapshot": Fixed((False, True)),
        "evict.num_tokens": Fixed((1, 2)),
        "evict.swa_num_tokens": Fixed((0, 1)),
        "evict.mamba_slots": Fixed((0, 1)),
        "free_sliding_window_kv.swa_num_tokens": Fixed((1,)),
        "inserted key": Every(),  # refresh_often: each key inserted so far
        "roll": Fixed((5,)),  # the reset rule resets on roll 5 only
        "bad call": Every(),
        # a bad call is rejected before it reads its key: one representative key each
        "bad_call.namespace": Fixed((None,)),
        "bad_call.tail": Fixed(([],)),
    },
)
"""One alphabet for every rule set: page sizes 1 and 2, tokens {0, 1}, two namespaces,
windows 1 and 2, small evict counts, every kind of bad call once."""


# ---- running one step ---------------------------------------------------------------------
