"""The canonical state (SPEC.md "The canonical state"): a machine pictured as a value
that two states share exactly when every future step would go the same way in both, up to
renaming of KV indices, state slots and opaque hashes. The state explorer's visited set
holds these (``canonical``)."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any, cast

from hypothesis.stateful import RuleBasedStateMachine

from radixkv_conformance.explore.bounds import LOW
from radixkv_conformance.explore.driver import (
    State,
)
from radixkv_conformance.explore.memory import memory_picture

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
