"""The bounds of a state exploration: how many token values, namespaces, locks and
steps the explorer may use, parsed from ``--states``/``--explore`` (``parse_bounds``), the
presets (``ci``, ``large``) and the staged default (``TREE``), and each cache's own bounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from radixkv_conformance.explore.alphabet import (
    ALPHABET,
    NAMESPACES,
    Alphabet,
    Fixed,
    Labels,
    TokenLists,
)

LOW = 1 << 10
"""Where the kit's KV indices start in an explored run: above every number the bounds give
a meaning of its own (``Bounds.low``) and every rank a canonical picture holds."""
SLOTS = 1 << 20
"""Where the kit's state slots start: a range of their own, so that a slot and a KV index
handed out at different times never compare (each kind is ranked apart)."""
EVICT_ALL = 1 << 20  # the machines' "evict everything"

# ---- bounds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """The bounded configuration: what each draw may take, how many locks, how deep.

    ``length`` bounds keys at ``length + page_size - 1`` tokens (so a page size of 2 still
    has a partial page); ``locks`` bounds the lock handles held at once (a state holding more
    is checked but not expanded); ``depth`` caps the breadth-first levels (None: none);
    the first ``floor`` levels are explored whole before a time budget may end the
    exploration, so what they reach is the same on a fast machine and a loaded one;
    ``deeper`` adds a stage whose keys and windows are that many pages longer, ``leaves`` a
    stage of one-page keys over that many token values (``stages``); ``memory=1`` tells an
    adapter's states apart by its engine's memory as well as its snapshot (``memory.py``);
    ``priorities`` are the eviction priorities an insert may carry where the adapter claims
    capability ``priority`` (the two-leaf stage adds 0 and 1 to them).
    """

    pages: tuple[int, ...] = (1,)
    windows: tuple[int, ...] = (1,)
    tokens: int = 2
    length: int = 1
    namespaces: int = 1
    locks: int = 1
    evict: tuple[int, ...] = (1, EVICT_ALL)
    depth: int | None = None
    floor: int = 0
    deeper: int = 0
    leaves: int = 0
    memory: int = 0  # 1: an adapter without canonical_state is keyed by its memory too
    priorities: tuple[int, ...] = (0,)  # an insert's eviction priority (capability priority)
    skip: tuple[str, ...] = ()  # rules left out (the random search runs them)

    def text(self) -> str:
        def many(values: Iterable[int]) -> str:
            return "+".join("all" if v == EVICT_ALL else str(v) for v in values)

        cap = "none" if self.depth is None else str(self.depth)
        return (
            f"page={many(self.pages)},window={many(self.windows)},tokens={self.tokens},"
            f"length={self.length},namespaces={self.namespaces},locks={self.locks},"
            f"evict={many(self.evict)},depth={cap}"
            + (f",floor={self.floor}" if self.floor else "")
            + (f",deeper={self.deeper}" if self.deeper else "")
            + (f",leaves={self.leaves}" if self.leaves else "")
            + (",memory=1" if self.memory else "")
            + (f",priorities={many(self.priorities)}" if self.priorities != (0,) else "")
            + (f",skip={'+'.join(self.skip)}" if self.skip else "")
        )

    def stages(self) -> tuple[Bounds, ...]:
        """These bounds widened in steps, for a time-boxed exploration: one namespace first
        (the tree's depth comes sooner: two namespaces double every level); then, with
        ``leaves``, one-page keys over that many token values, inserted with a low and a
        high priority, to the same floor: a tree of several leaves, whose evictions choose
        their victim by recency or priority (with one token value every tree is a chain, and
        an eviction order a match forgot to refresh takes five steps to show: two inserts,
        an eviction, a match, an eviction); then, with ``deeper``, keys and windows
        ``deeper`` pages longer in one namespace, two levels lower (a lock whose window meets
        a tombstone with a live page above it takes three steps); then every namespace, one
        level lower: an eviction across two namespaces takes three steps, and a split whose
        upper half must keep its place in a first-in-first-out order four (a key of two
        pages, a key in the other namespace, a split of the first, an eviction). Each level
        of the last two is several times wider."""
        narrow = dataclasses.replace(self, namespaces=1, deeper=0, leaves=0)
        lower = max(0, self.floor - 2)
        stages = [narrow]
        if self.leaves > self.tokens:  # with fewer, the first stage has these trees
            low_and_high = tuple(sorted({*self.priorities, 0, 1}))
            stages.append(
                dataclasses.replace(narrow, tokens=self.leaves, length=1, priorities=low_and_high)
            )
        if self.deeper:
            longer = tuple(w + self.deeper * p for w in self.windows for p in self.pages[:1])
            stages.append(
                dataclasses.replace(
                    narrow, length=self.length + self.deeper, windows=longer, floor=lower
                )
            )
        if self.namespaces > 1:
            below = max(0, self.floor - 1)
            stages.append(dataclasses.replace(self, deeper=0, leaves=0, floor=below))
        return tuple(stages)

    def low(self) -> int:
        """Numbers below this keep their value in a canonical state: tokens, page sizes,
        windows, lock counts (the bounds admit no larger ones); every other number is an
        identity or a stamp and keeps only its rank."""
        kept = (self.tokens, *self.pages, *self.windows, self.locks, self.namespaces)
        return max(*kept, *self.priorities) + 1

    def alphabet(self) -> Alphabet:
        lengths = _lengths(self.length)
        tokens = TokenLists("tokens", self.tokens, lengths)
        namespaces = Labels("namespaces", NAMESPACES.values[: self.namespaces])
        small = tuple(v for v in self.evict if v != EVICT_ALL)[:2] or (1,)
        domains = {
            **ALPHABET.domains,
            "page_size": Fixed(self.pages),
            "window": Fixed(self.windows),
            "priority": Fixed(self.priorities),
            "namespace": namespaces,
            "tail": tokens,
            # 0: an eviction of SWA pages or Mamba states alone (a no-op for the rest)
            "evict.num_tokens": Fixed((0, *self.evict)),
            "evict.swa_num_tokens": Fixed((0, *small)),
        }
        return Alphabet(f"states {self.text()}", domains, frozenset(self.skip))


def _lengths(n: int) -> Callable[[int], Sequence[int]]:
    return lambda page_size: range(n + page_size)


def parse_bounds(text: str, base: Bounds | None = None) -> Bounds:
    """``page=1+2,length=2,namespaces=2,locks=2,evict=1+all,depth=8`` (any subset, over
    ``base``), a preset's name (``PRESETS``), or a preset's name and then changes to it
    (``tree,memory=1``); anything else is a ``LookupError`` that names what is accepted."""
    items = [item for item in text.split(",") if item]
    bounds = base or Bounds()
    if items and items[0] in PRESETS:
        bounds, items = PRESETS[items[0]], items[1:]
    names = sorted(f.name for f in dataclasses.fields(Bounds))
    for item in items:
        key, sep, value = item.partition("=")
        key = ALIASES.get(key, key)
        if not sep or key not in names:
            raise LookupError(
                f"bounds {text!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(names)}"
                f" (or a preset: {', '.join(PRESETS)})"
            )
        try:
            bounds = dataclasses.replace(bounds, **{key: _bound_value(key, value)})
        except ValueError as error:
            raise LookupError(f"bounds {text!r}: {key}={value!r}: {error}") from None
    return bounds


ALIASES = {"page": "pages", "window": "windows"}


def _bound_value(key: str, value: str) -> Any:
    if key == "depth":
        return None if value == "none" else _number(value, "none or a positive step count")
    if key == "memory":
        if value not in ("0", "1"):
            raise ValueError("expected 0 or 1")
        return int(value)
    if key in ("floor", "deeper", "leaves"):
        unit = {"floor": "step", "deeper": "page", "leaves": "token value"}[key]
        return _number(value, f"a {unit} count, 0 or more", least=0)
    if key == "priorities":
        return tuple(_number(v, "whole numbers joined by +", least=0) for v in value.split("+"))
    if key == "skip":
        return tuple(filter(None, value.split("+")))
    if key in ("pages", "windows", "evict"):
        many = "positive numbers joined by +" + (" (or all)" if key == "evict" else "")
        return tuple(
            EVICT_ALL if v == "all" and key == "evict" else _number(v, many)
            for v in value.split("+")
        )
    return _number(value, "a positive number")


def _number(text: str, accepted: str, least: int = 1) -> int:
    if not text.isdigit() or int(text) < least:
        raise ValueError(f"expected {accepted}")
    return int(text)


TREE = Bounds(
    tokens=1,
    length=2,
    namespaces=2,
    locks=1,
    floor=5,
    deeper=1,
    leaves=2,
    skip=("bad_call", "refresh_often"),
)
"""Bounds that admit trees: keys of two pages (so a parent, a split, an interior lock), two
namespaces, one lock held, evict none, one page and all; no depth cap (a time budget ends
it), but whatever the budget every sequence is explored of five steps in one namespace, of
five over two one-page keys inserted with priorities 0 and 1 (two leaves: an eviction
chooses its victim by recency or priority), of three with keys of three pages and a window
of two (a lock's window that meets a tombstone with a live page above it), and of four in
two namespaces (a split beside another leaf; every tree situation but Mamba's removal after
a split is within them). On one core of a 2-core machine (``radixkv check --budget 10``,
two caches at a time) the floors take, for radixkv's caches: the first up to 10 s, the
two-leaf one up to 11 s (the policy caches, whose inserts carry priorities), the one with
longer keys under 3 s, the two-namespace one up to 23 s (SWA the slowest). Bad calls and
refresh bursts change no tree: the random search runs them, and leaving them out here takes
a level deeper in the same time."""
PRESETS = {
    "tiny": Bounds(),
    "ci": TREE,  # a MODULE:FACTORY's (radixkv's own caches: ``OWN_BOUNDS``)
    "tree": TREE,
    "large": Bounds(pages=(1, 2), length=2, namespaces=2, locks=2),
}
"""Named bounds; ``own_bounds`` picks the CI bounds of each of radixkv's caches."""
OWN_BOUNDS = {  # radixkv's caches in CI (about two minutes in all on 2 cores): tox -e stateful
    "ci": {
        "RadixCache": "tokens=2,length=1,locks=1",  # two leaves: the victim order is checked
        "RadixCache (SWA)": "tokens=1,length=1,locks=1",
        "MambaRadixCache": "tokens=1,length=1,locks=1",
        "ChunkCache": "tokens=2,length=1,locks=1",
        "RadixTrie": "tokens=2,length=1,locks=1",
    },
    "large": {  # by hand: tox -e states
        "RadixCache": "tokens=1,length=2,locks=1",  # keys of two tokens: splits
        "RadixCache (SWA)": "tokens=2,length=1,locks=1",
        "MambaRadixCache": "tokens=2,length=1,locks=1",
        "ChunkCache": "tokens=2,length=2,namespaces=2,locks=2",
        "RadixTrie": "tokens=2,length=2,locks=1,depth=4",  # no hook yet: sevenfold a level
    },
}


def own_bounds(text: str, label: str) -> Bounds:
    """``ci`` and ``large`` name per-cache bounds for radixkv's own caches."""
    per_cache = OWN_BOUNDS.get(text, {})
    return parse_bounds(per_cache[label]) if label in per_cache else parse_bounds(text)
