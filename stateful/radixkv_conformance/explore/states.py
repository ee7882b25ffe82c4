"""Every reachable state: breadth-first explicit-state exploration to a fixpoint.

``radixkv check --states BOUNDS`` explores the pair (implementation, spec model) the way
TLC or SPIN explore a model: breadth first, from every initial state (page size, window),
every enabled operation of a bounded alphabet from every state, every invariant checked and
every result compared with the spec after every step, and a visited set of *canonical
states* (``canonical``; SPEC.md "The canonical state"), until no new state appears (a
fixpoint: every state the bounds admit is reached and conforms) or the depth cap.

Operations are the kit's rules run by the sequence explorer's driver (``exhaustive``), so a
step is a FORMAT.md trace step and every finding comes with its trace; breadth-first order
makes each one a shortest sequence to its finding.

A state is expanded from a deep copy of its machine (adapter and spec model included); an
engine whose state a deepcopy refuses has each state rebuilt by replaying its shortest path
(``fork="rerun"``, said in the report).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hypothesis.stateful import RuleBasedStateMachine

from radixkv_conformance.explore.alphabet import (
    ALPHABET,
    NAMESPACES,
    Alphabet,
    Fixed,
    Labels,
    TokenLists,
)
from radixkv_conformance.explore.driver import (
    Call,
    Driver,
    Fork,
    RuleCall,
    State,
    quiet_build_context,
)
from radixkv_conformance.explore.memory import memory_picture
from radixkv_conformance.explore.sequences import (
    ExhaustiveReport,
    Explorer,
    Target,
    listed,
)
from radixkv_conformance.explore.workers import Workers, tallies, why_not_fork
from radixkv_conformance.findings import Failure, finding_lines
from radixkv_conformance.trace import file_label

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
    adapter's states apart by its engine's memory as well as its snapshot (``memory.py``).
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
            + (f",skip={'+'.join(self.skip)}" if self.skip else "")
        )

    def stages(self) -> tuple[Bounds, ...]:
        """These bounds widened in steps, for a time-boxed exploration: one namespace first
        (the tree's depth comes sooner: two namespaces double every level); then, with
        ``leaves``, one-page keys over that many token values, to the same floor: a tree of
        several leaves, whose evictions choose their victim by recency (with one token value
        every tree is a chain, and an eviction order a match forgot to refresh takes five
        steps to show: two inserts, an eviction, a match, an eviction); then, with
        ``deeper``, keys and windows ``deeper`` pages longer in one namespace; then every
        namespace. The last two stages' floor is two levels lower: what they add takes three
        steps (an eviction across two namespaces; a lock whose window meets a tombstone
        with a live page above it), and each of their levels is several times wider."""
        narrow = dataclasses.replace(self, namespaces=1, deeper=0, leaves=0)
        lower = max(0, self.floor - 2)
        stages = [narrow]
        if self.leaves > self.tokens:  # with fewer, the first stage has these trees
            stages.append(dataclasses.replace(narrow, tokens=self.leaves, length=1))
        if self.deeper:
            longer = tuple(w + self.deeper * p for w in self.windows for p in self.pages[:1])
            stages.append(
                dataclasses.replace(
                    narrow, length=self.length + self.deeper, windows=longer, floor=lower
                )
            )
        if self.namespaces > 1:
            stages.append(dataclasses.replace(self, deeper=0, leaves=0, floor=lower))
        return tuple(stages)

    def low(self) -> int:
        """Numbers below this keep their value in a canonical state: tokens, page sizes,
        windows, lock counts (the bounds admit no larger ones); every other number is an
        identity or a stamp and keeps only its rank."""
        return max(self.tokens, *self.pages, *self.windows, self.locks, self.namespaces) + 1

    def alphabet(self) -> Alphabet:
        lengths = _lengths(self.length)
        tokens = TokenLists("tokens", self.tokens, lengths)
        namespaces = Labels("namespaces", NAMESPACES.values[: self.namespaces])
        small = tuple(v for v in self.evict if v != EVICT_ALL)[:2] or (1,)
        domains = {
            **ALPHABET.domains,
            "page_size": Fixed(self.pages),
            "window": Fixed(self.windows),
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
five over two one-page keys (two leaves: an eviction chooses its victim by recency), of
three with keys of three pages and a window of two (a lock's window that meets a tombstone
with a live page above it), and of three in two namespaces (every tree situation but
Mamba's removal after a split is within them). On one core of a 2-core machine the first
two floors take 2 to 10 s each for radixkv's caches (SWA the slowest), the later ones 1 to
3 s. Bad calls and refresh bursts change no tree: the random search runs them, and leaving
them out here takes a level deeper in the same time."""
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


# ---- the canonical state ----------------------------------------------------------------------

HISTORY = frozenset(
    {
        "trace",
        "check",
        "events",
        "copies",
        "acknowledged",
        "session",
        "matched",
        "probe",
        "last_match",
    }
)
"""What only records what ran (or is the same in every state): never in a canonical state."""
STALENESS = frozenset({"resets", "epoch", "deleted_at"})
"""What the kit keeps only to tell stale handles from live ones: each handle records that."""
CONSTANT = frozenset({"page_size", "window", "profile", "caps"})  # the start variant says it
LEDGER = frozenset({"given", "freed", "swa_freed", "given_slots", "freed_slots"})
COUNTERS = frozenset({"next_index", "next_slot"})  # every new one is above every given one
OWN = frozenset({"sut", "model", "keys_seen", "cached_refs"})
PER_LOCK = frozenset({"swa_extents"})
"""The kit's records of each lock held, keyed by the step that took it: a number of the
history, not of the state, so each is pictured by its lock's own picture instead (``_per_lock``)."""


def canonical(
    state: State, hypothesis_owned: frozenset[str], low: int = LOW, memory: bool = False
) -> Hashable:
    """The canonical form of a state (SPEC.md "The canonical state").

    The raw picture is the start variant, the symmetry counts, the kit's own state (handles,
    locks, keys, ledger), the spec model with its ticks as ranks, and the implementation's
    ``canonical_state`` (or, for an adapter without one, its snapshot, contents and sizes,
    and with ``memory`` the picture of the engine's memory: ``memory.py``); then every
    number >= ``low``
    anywhere in it is replaced by ``low`` + its rank among them (one order-preserving
    renaming of the whole state).
    """
    m = state.machine
    sut, memory_of, names = _implementation(m, state.bundles, memory)
    raw: tuple[Any, ...] = (
        state.variant,
        state.seen,
        _kit(m, state.bundles, hypothesis_owned, names),
        _model(m.model),
        sut,
        memory_of,
    )
    live = _numbers(raw)
    ledger = tuple(
        (name, tuple(sorted(set(getattr(m, name, ())) & live))) for name in sorted(LEDGER)
    )
    ranks = {n: low + r for r, n in enumerate(sorted(n for n in live if n >= low))}
    return _renamed((*raw, ledger), ranks)  # the ledger holds no number ``raw`` lacks


Names = dict[int, Hashable]
"""The implementation's name for each handle object, by ``id()`` (``canonical_state``)."""


def _implementation(
    m: Any, bundles: dict[str, list[Any]], memory: bool
) -> tuple[Hashable, Hashable, Names]:
    """The implementation's part of the picture, with ``memory`` the picture of its memory
    where the adapter has no hook (``memory.py``), and its names for the handles held."""
    hook = getattr(m.sut, "canonical_state", None)
    if not callable(hook):  # no hook: the adapter's own pictures (and the engine's memory)
        sut = m.sut
        shown = (_plain(sut.snapshot()), _plain(sut.contents()), _plain(sut.sizes()))
        whole = memory_picture(sut, (RuleBasedStateMachine,)) if memory else None
        return shown, whole, {}
    held = [*(v for values in bundles.values() for v in values), *_refs(m)]
    objects = [o for v in held for o in _cache_objects(v)]
    picture, names = hook(objects)
    if len(names) != len(objects):
        raise ValueError(f"canonical_state named {len(names)} of {len(objects)} handles")
    return picture, None, {id(o): name for o, name in zip(objects, names, strict=True)}


def _refs(m: Any) -> list[Any]:
    return list(getattr(m, "cached_refs", {}).values())


def _cache_objects(value: Any) -> list[Any]:
    """What the cache returned inside one of the kit's handles: a node, a lock token."""
    if hasattr(value, "token") and hasattr(value, "node"):  # a lock
        return [value.token, *_cache_objects(value.node)]
    if hasattr(value, "prefix") and hasattr(value, "born"):  # a node handle
        return [value.handle]
    return [value]


def _kit(m: Any, bundles: dict[str, list[Any]], owned: frozenset[str], names: Names) -> Hashable:
    skip = owned | HISTORY | STALENESS | CONSTANT | LEDGER | COUNTERS | OWN
    locks = bundles.get("locks", [])
    rest = tuple(
        sorted((k, _kit_value(m, k, v, locks, names)) for k, v in vars(m).items() if k not in skip)
    )
    held = tuple(  # an empty bundle is no bundle (a rule may target one it never fills)
        (name, _handles(m, values, name != "locks", names))
        for name, values in sorted(bundles.items())
        if values
    )
    refs = _handles(m, _refs(m), True, names)
    return (held, refs, tuple(sorted(set(map(tuple, m.keys_seen)))), rest)


def _kit_value(m: Any, name: str, value: Any, locks: Sequence[Any], names: Names) -> Hashable:
    if name in HASHES:
        return _opaque(value)
    if name in PER_LOCK:
        return _per_lock(m, value, locks, names)
    return _plain(value)


def _per_lock(m: Any, records: Any, locks: Sequence[Any], names: Names) -> Hashable:
    """Records kept per lock (``PER_LOCK``), by the step of the lock that took each: grouped
    by the position each names, oldest first (an unlock without its receipt undoes the
    newest on its node); with receipts each beside its lock's picture (the unlock of a lock
    forgets that lock's record), without them alone (the locks of one node are alike)."""
    held = {lock.step: lock for lock in locks}
    by_position: dict[Hashable, list[Hashable]] = {}
    for step, record in sorted(records.items()):
        lock = held.get(step)
        name = _handle(m, lock, names) if lock is not None and m.unlock_by_token else None
        by_position.setdefault(_plain(record.position), []).append((name, _plain(record)))
    return ("per lock", *_sorted([(at, tuple(kept)) for at, kept in by_position.items()]))


def _handles(m: Any, values: Sequence[Any], as_set: bool, names: Names) -> Hashable:
    """Handles as sets (a node handle can be drawn again and again), locks as multisets
    (each one can be undone once)."""
    canon = [_handle(m, v, names) for v in values]
    return tuple(_sorted(list(set(canon)) if as_set else canon))


def _handle(m: Any, value: Any, names: Names) -> Hashable:
    if hasattr(value, "token") and hasattr(value, "node"):  # a lock
        token = _named(value.token, names)
        return ("lock", _handle(m, value.node, names), token, value.refused)
    if hasattr(value, "prefix") and hasattr(value, "born"):  # a node handle
        if m.is_stale(value):  # every use of it must be rejected, whichever node it was
            return ("stale node",)
        return ("node", value.namespace, value.prefix, _named(value.handle, names))
    return ("value", _named(value, names))


def _named(value: Any, names: Names) -> Hashable:
    return names[id(value)] if id(value) in names else _shallow(value)


HASHES = frozenset({"hash_of", "page_of", "page_stream", "router_stream"})
"""The kit's records of page hashes (a function of namespace and tokens, never of history):
compared as text, so no digit in a digest is renamed along with the KV indices."""


def _opaque(value: Any) -> Hashable:
    """``value`` with every scalar as its ``repr`` (nothing in it renamed), counters of
    records applied left out (the events oracle's ``records``: never read)."""
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _opaque(v)) for k, v in value.items()))
    fields = getattr(value, "__dict__", None)
    if fields is not None:
        kept = {k: v for k, v in fields.items() if k != "records"}
        return (type(value).__name__, _opaque(kept))
    return repr(value)


TICKS = frozenset({"recency", "latest", "born", "used"})
"""The spec models' fields whose values are ticks of their logical clock."""
UNREAD = frozenset({"clock", "last_reset"})
"""Spec fields no future reads once ticks are ranks: every new tick is above every earlier
one, and ``last_reset`` is read only against a handle's tick (the kit's handles say
whether they are stale)."""
HITLESS = frozenset({"lru", "lru-split-refreshes-both", "any", "fifo", "mru", "priority"})
"""Victim orders that never read a page's hit count (only ``lfu`` does)."""


def _model(model: Any) -> Hashable:
    """The spec model's fields, ticks as dense ranks, what no future reads left out."""
    fields = dict(vars(model))
    for name in UNREAD:
        fields.pop(name, None)
    if getattr(getattr(model, "victims", None), "name", None) in HITLESS:
        fields.pop("hits", None)
    ticks = [t for name in TICKS & fields.keys() for t in fields[name].values()]
    rank = {t: r for r, t in enumerate(sorted(set(ticks)))}
    for name in TICKS & fields.keys():
        fields[name] = {k: rank[t] for k, t in fields[name].items()}
    return (type(model).__name__, _plain(fields))


def _shallow(value: Any) -> Hashable:
    """A handle the cache returned, by its own plain fields (a node's id, stamp, lock count):
    never the tree it links to."""
    if _is_plain(value):
        return _plain(value)
    names = list(getattr(value, "__dict__", {})) or list(getattr(type(value), "__slots__", ()))
    fields = [(k, getattr(value, k, None)) for k in sorted(names)]
    return (type(value).__name__, tuple((k, _plain(v)) for k, v in fields if _is_plain(v)))


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    return isinstance(value, (tuple, frozenset)) and all(map(_is_plain, value))


_DIGITS = re.compile(r"(\d+)")


def _plain(value: Any, depth: int = 0) -> Hashable:
    """Any value as nested tuples of scalars: containers sorted where their order is not
    state (dicts, sets), objects as their fields, numbers inside text as numbers."""
    kind = type(value)
    if kind in _SCALARS:
        return cast(Hashable, value)
    if depth > 40:
        raise ValueError("a state too deep to picture (a cycle?)")
    d = depth + 1
    if kind is tuple or kind is list:
        return tuple([_plain(v, d) for v in value])
    if kind is str:
        parts = _DIGITS.split(value)
        return value if len(parts) == 1 else ("str", *(int(p) if p.isdigit() else p for p in parts))
    if isinstance(value, dict):
        return ("dict", *_sorted([(_plain(k, d), _plain(v, d)) for k, v in value.items()]))
    if isinstance(value, (set, frozenset)):
        return ("set", *_sorted([_plain(v, d) for v in value]))
    if isinstance(value, (bool, int, float, bytes)) or value is None:
        return value
    if isinstance(value, str):
        return _plain(str(value), depth)
    if isinstance(value, (list, tuple)):
        return tuple([_plain(v, d) for v in value])
    if callable(value) and not hasattr(value, "__dict__"):
        return ("callable", getattr(value, "__qualname__", type(value).__name__))
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # a tensor or an array
        return ("array", _plain(tolist(), d))
    fields = getattr(value, "__dict__", None)
    if fields is None:
        names = getattr(type(value), "__slots__", ())
        fields = {k: getattr(value, k) for k in names if hasattr(value, k)}
    return (type(value).__name__, _plain(fields, d))


_SCALARS = frozenset({type(None), bool, int, float, bytes})


def _sorted(items: list[Any]) -> list[Any]:
    """Items in their natural order (an order-preserving renaming keeps it), or by ``repr``
    where they do not compare (None beside a number, say)."""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


def _numbers(value: Any) -> set[float]:
    """Every number in nested tuples (NaN and bools are no numbers here); a loop, not a
    recursion: it runs on every state reached."""
    found: set[float] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is tuple:
            stack.extend(item)
        elif kind is int or (kind is not bool and isinstance(item, (int, float)) and item == item):
            found.add(item)
    return found


def _renamed(value: tuple[Any, ...], ranks: dict[float, int]) -> Hashable:
    """``value`` with each number in ``ranks`` replaced by its rank (bools kept)."""
    out: list[Any] = []
    for item in value:
        kind = type(item)
        if kind is tuple:
            out.append(_renamed(item, ranks))
        elif kind is int or kind is float or (kind is not bool and isinstance(item, (int, float))):
            out.append(ranks.get(item, item))
        else:
            out.append(item)  # any other leaf is returned as it came
    return tuple(out)


# ---- the exploration --------------------------------------------------------------------------


@dataclass
class StatesReport:
    """What one exploration reached: states, transitions, depth, fixpoint, findings."""

    name: str
    bounds: str
    fork: Fork
    merge: bool = True
    states: int = 0
    transitions: int = 0
    max_depth: int = 0
    fixpoint: bool = False
    budget_spent: bool = False  # stopped at its time budget, inside level ``complete + 1``
    complete: int = 0  # every state this many steps from a start was expanded
    beyond: int = 0  # successors past the lock bound: checked, not expanded
    seconds: float = 0.0
    by_depth: Counter[int] = field(default_factory=Counter)
    findings: dict[str, Failure] = field(default_factory=dict)
    outcomes: set[Hashable] = field(default_factory=set)  # what states show (``_outcome``)
    acknowledged: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def ending(self) -> str:
        if self.budget_spent:
            return (
                f"time budget spent: every state within {self.complete} steps expanded, "
                f"depth {self.complete + 1} in part"
            )
        return "fixpoint reached" if self.fixpoint else "depth cap reached, no fixpoint"

    def summary(self) -> str:
        """One line: how much, how deep, how it ended, within which bounds."""
        return (
            f"{self.states} states, {self.transitions} transitions in {self.seconds:.1f}s, "
            f"{self.ending()} ({self.bounds})"
        )

    def render(self) -> str:
        verdict = "ok" if self.passed else f"FAILED ({len(self.findings)} findings)"
        lines = [
            f"{self.name}: {verdict} — {self.states} states, {self.transitions} transitions, "
            f"deepest state at depth {self.max_depth}, {self.seconds:.1f}s, {self.ending()} "
            f"(fork={self.fork})",
            f"    bounds: {self.bounds}; {self.beyond} successors past the lock bound "
            "checked, not expanded",
        ]
        lines += [f"    note: {note}" for note in self.notes]
        if self.acknowledged:
            lines.append(f"    {self.acknowledged} transitions hit acknowledged findings")
        lines += listed(self.findings.values())
        return "\n".join(lines)


class _Breadth(Explorer):
    """The sequence explorer's steps and findings, breadth first over canonical states."""

    def __init__(self, driver: Driver, report: StatesReport, bounds: Bounds, fork: Fork):
        shim = ExhaustiveReport(report.name, 0, fork)
        super().__init__(driver, shim, fork)
        self.states, self.bounds = report, bounds
        self.visited: set[Hashable] = set()
        self.deadline = float("inf")
        self.on_finding: Callable[[Failure], None] | None = None

    def copy_failed(self, error: Exception) -> None:
        self.states.fork = "rerun"
        self.states.notes.append(f"copying a state failed ({error!r}): paths replayed")

    def rebuild(self, state: State) -> State:
        """The state again, by replaying its shortest path on a fresh machine, checked
        after each step as when it was reached (the invariants close each step's coverage
        probe); what the replay counts is taken back out: those steps were counted once."""
        counters = tallies(self.driver.machine_cls)
        kept = [Counter(counter) for counter in counters]
        new = self.driver.fresh()
        starts = len(self.driver.initializers)
        for at, (rule, picks) in enumerate(state.path):
            if at == starts:
                self._start(new)
            self.driver.call(new, rule, picks)
            if at >= starts:
                self.driver.check(new)
        if len(state.path) == starts:
            self._start(new)
        new.variant = state.variant
        for counter, before in zip(counters, kept, strict=True):
            counter.clear()
            counter.update(before)
        return new

    def _start(self, root: State) -> None:
        """A start state as ``run`` makes it: checked, then its identities offset."""
        self.driver.check(root)
        _offset(root.machine)

    def run(self, merge: bool, jobs: int = 1) -> None:
        level: list[State] = []
        for root, call in self._initialized(self.driver.fresh(), 0):
            failed = call.error or self._check(root)
            if failed is not None:
                self._found(root, [], failed)
                continue
            _offset(root.machine)
            if self._new(root, self._key(root), 0, merge):
                level.append(root)
        depth = 0
        workers = Workers(self, jobs) if jobs > 1 else None
        expand = workers.expand if workers is not None else self._expand
        try:
            while level and (self.bounds.depth is None or depth < self.bounds.depth):
                nxt: list[State] = []
                for state, successors in zip(level, expand(level, depth), strict=True):
                    nxt += self._take(state, successors, depth, merge)
                level, depth = nxt, depth + 1
                self.states.complete = depth
        except _OutOfTime:
            self.states.budget_spent = True
            return
        finally:
            if workers is not None:
                workers.close()
        self.states.fixpoint = not level

    def _expand(self, level: list[State], depth: int) -> Iterator[Iterable[Successor]]:
        """Each state's successors, in order (``Workers.expand`` is the same, in parallel)."""
        for state in level:
            yield self.successors(state)

    def successors(self, state: State) -> Iterator[Successor]:
        """What each step from ``state`` leads to: a finding, a state past the lock bound,
        or a state with its canonical key (whether it was seen before is the caller's), one
        at a time: a copy the caller does not keep is freed before the next is made."""
        steps = state.steps
        for child, call in self.children(state):
            path = [*steps, call.step]
            failed = call.error or self._check(child)
            if failed is not None:
                yield Successor(None, call.step, self._finding(child, path, failed))
            elif len(child.bundles.get("locks", ())) > self.bounds.locks:
                yield Successor(None, call.step, beyond=True)
            else:
                yield Successor(child, call.step, key=self._key(child))

    def _take(
        self, state: State, successors: Iterable[Successor], depth: int, merge: bool
    ) -> list[State]:
        """Count ``successors``, keep their findings and return the new states among them."""
        out = []
        steps = state.steps
        for successor in successors:
            self.states.transitions += 1
            self._maybe_progress()
            if depth >= self.bounds.floor and time.perf_counter() >= self.deadline:
                raise _OutOfTime
            if successor.finding is not None:
                self._keep(successor.finding)
            elif successor.beyond:
                self.states.beyond += 1
            elif (child := successor.state) is not None:
                child.steps = [*steps, successor.step]
                if self._new(child, successor.key, depth + 1, merge):
                    out.append(child)
        return out

    def _key(self, state: State) -> Hashable:
        low, memory = self.bounds.low(), bool(self.bounds.memory)
        return canonical(state, self.driver.hypothesis_owned, low, memory)

    def _new(self, state: State, key: Hashable, depth: int, merge: bool) -> bool:
        self.states.outcomes.add(_outcome(key))
        if merge and key in self.visited:
            return False
        self.visited.add(key)
        self.states.states += 1
        self.states.by_depth[depth] += 1
        self.states.max_depth = max(self.states.max_depth, depth)
        if self.fork == "rerun":
            state.machine = None  # rebuilt from its path when expanded
        return True

    def children(self, state: State, initial: bool = False) -> Iterator[tuple[State, Call]]:
        if state.machine is None:
            state = self.rebuild(state)
        return super().children(state, initial)

    def _found(self, state: State, path: list[Any], error: Exception) -> None:
        finding = self._finding(state, path, error)
        if finding is not None:
            self._keep(finding)

    def _keep(self, found: Failure) -> None:
        """Breadth first, the first sequence to a finding is a shortest one: said at once."""
        shortest = self.report.findings.get(found.finding)
        if shortest is None or len(found.calls) < len(shortest.calls):
            self.report.findings[found.finding] = found
            if shortest is None and self.on_finding is not None:
                self.on_finding(found)


@dataclass
class Successor:
    """One step from a state, as ``_Breadth.successors`` judged it."""

    state: State | None  # the state it leads to, where that state is to be kept
    step: RuleCall
    finding: Failure | None = None
    beyond: bool = False  # past the lock bound: checked, not expanded
    key: Hashable = None  # the canonical key of a state to keep (``canonical``)


class _OutOfTime(Exception):
    """The exploration's time budget is spent (the level in progress stays in part)."""


def _outcome(key: Hashable) -> Hashable:
    """What a state shows the caller: the start variant, the spec's state and the cache's
    own part of the picture (the soundness test compares these, merged or not)."""
    parts: tuple[Any, ...] = key  # type: ignore[assignment]  # canonical() builds a tuple
    return (parts[0], parts[3], parts[4])


def _offset(machine: Any) -> None:
    """Start the kit's KV indices at ``LOW`` and its state slots at ``SLOTS``: identities,
    never confused with tokens, counts or ranks, nor with each other (a trace replays the
    same with any start)."""
    machine.next_index = max(machine.next_index, LOW)
    machine.next_slot = max(machine.next_slot, SLOTS)


def explore_states(
    machine_cls: Any,
    bounds: Bounds,
    *,
    name: str | None = None,
    merge: bool = True,
    fork: Fork = "copy",
    progress: Callable[[StatesReport], None] | None = None,
    budget: float | None = None,
    on_finding: Callable[[Failure], None] | None = None,
    jobs: int = 1,
) -> StatesReport:
    """Breadth-first exploration of ``machine_cls`` within ``bounds``; never raises for a
    finding (each distinct one is in ``findings`` with a shortest sequence, and given to
    ``on_finding`` as soon as it is found: shortest first). ``budget`` seconds end it inside
    a level (the report says which levels were complete). ``merge=False`` expands every state
    reached, merged or not (the soundness test's reference; give it a depth cap). ``jobs``
    worker processes expand each level (``workers``): the same states, findings and shortest
    traces as one process."""
    if budget is not None and budget <= 0:
        raise ValueError(f"the exploration's budget must be positive seconds, got {budget}")
    if jobs < 1:
        raise ValueError(f"the exploration's jobs must be 1 or more, got {jobs}")
    started = time.perf_counter()
    report = StatesReport(name or machine_cls.__name__, bounds.text(), fork, merge)
    explorer = _Breadth(Driver(machine_cls, bounds.alphabet()), report, bounds, fork)
    explorer.on_finding = on_finding
    if budget is not None:
        explorer.deadline = started + budget
    if progress is not None:
        explorer.progress = lambda _: progress(report)
    refused = why_not_fork() if jobs > 1 else None
    if refused is not None:
        report.notes.append(f"{jobs} jobs asked for, but {refused}: one process")
        jobs = 1
    with quiet_build_context():
        explorer.run(merge, jobs)
    report.findings = explorer.report.findings
    report.acknowledged = explorer.report.acknowledged
    report.seconds = time.perf_counter() - started
    return report


# ---- what ``radixkv check --states BOUNDS`` runs --------------------------------------------


def command(
    targets: Sequence[Target],
    text: str,
    traces: Path,
    own: bool,
    budget: float | None = None,
    jobs: int = 1,
) -> int:
    """Explore each target (``budget`` seconds each at most, shared by the stages of a
    foreign cache's bounds: ``Bounds.stages``) with ``jobs`` worker processes, print each
    finding as it is found with its trace, then each exploration's row."""
    from radixkv_conformance.progress import Progress

    reports = []
    for target in targets:
        bounds = own_bounds(text, target.label) if own else parse_bounds(text)
        stages = bounds.stages() if budget is not None and not own else (bounds,)
        announce = Announce(target.label, traces / f"states-{file_label(target.label)}")
        for stage in stages:
            with Progress(target.label) as bar:

                def show(report: StatesReport, bar: Progress = bar) -> None:
                    bar.update(Counter({"runs": report.states, "steps": report.transitions}))

                report = explore_states(
                    target.machine(),
                    stage,
                    name=target.label,
                    progress=show,
                    budget=None if budget is None else budget / len(stages),
                    on_finding=announce,
                    jobs=jobs,
                )
            reports.append(report)
            print(report.render(), flush=True)
    print("\n" + table(reports))
    failed = [r.name for r in reports if not r.passed]
    print("every reachable state held" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


class Announce:
    """Prints each finding the moment it is found, and writes its trace (``PREFIX-N.json``)."""

    def __init__(self, label: str, prefix: Path) -> None:
        self.label, self.prefix, self.count = label, prefix, 0
        self.said: set[str] = set()  # a later stage finds them again: said once

    def __call__(self, found: Failure) -> None:
        from radixkv_conformance.trace import write

        if found.finding in self.said:
            return
        self.said.add(found.finding)
        self.count += 1
        print("\n".join(finding_lines(found, self.count, "found shortest", self.label)))
        if found.trace:  # the kit's machines trace every finding
            path = self.prefix.with_name(f"{self.prefix.name}-{self.count}.json")
            write(found.trace, path)
            print(f"  trace: {path}")
        print(flush=True)


def table(reports: Sequence[StatesReport]) -> str:
    """The table of docs/verification/states.md (docs/figures.py): one row per exploration."""
    rows = [
        "| cache | bounds | states | transitions | max depth | seconds | fixpoint |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        rows.append(
            f"| {r.name} | `{r.bounds}` | {r.states} | {r.transitions} | {r.max_depth} "
            f"| {r.seconds:.1f} | {'yes' if r.fixpoint else 'no'} |"
        )
    return "\n".join(rows)
