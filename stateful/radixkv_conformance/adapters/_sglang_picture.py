"""sglang 0.5.23's ``UnifiedRadixCache`` on the Python tree core, in canonical terms
(``TreePicture``): the whole state of the cache as the state explorer's canonical states
need it (``radixkv check --states``), for ``sglang_swa`` and ``sglang_mamba``. Loaded with
the cache by ``_sglang_unified``."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import numbers
import types
from array import array
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from types import ModuleType
from typing import Any

import torch

from radixkv_conformance.adapters._sglang_unified import UnifiedAdapter

STAMPS = frozenset({"last_access_time", "creation_time"})
"""A node's stamps of sglang's access clock (a global counter, every new stamp above every
live one; a match stamps a path ``t, t - 1e-5, ...`` down from a new ``t``): compared by order
only (``__lt__``, the eviction strategies), so kept as dense ranks (ties kept)."""
UUID_KEYS = frozenset({"uuid", "host_uuid"})
"""``ComponentData.metadata`` keys whose values are lock-segment uuids (per-component global
counters, every new one above every live one): compared by equality only (a release stops at
the node whose uuid is its receipt's), so kept as ranks."""
UUID_MAPS = frozenset({"component_lock_uuids", "component_host_lock_uuids"})
"""A lock receipt's fields: component -> the uuid of its segment's boundary (or None)."""
NODE_ID_FIELDS = frozenset(
    {"node", "node_id", "last_device_node", "last_host_node", "best_match_node"}
    | {"last_visited_node_id", "load_back_pending_id"}
)
"""Fields holding a node id (a lock's node, a receipt's anchor, a match result's nodes, a
load-back's anchor): named by the node's place."""
ID_KEYED = frozenset({"_node_arena", "full_host_duplicates", "cache"})
"""Dicts keyed by node id: the arena, the host duplicates, an LRU list's members."""
ID_VALUED = frozenset({"_pending_internal_evictions"})
"""Dicts whose values are node ids."""
STRATEGY_ONLY = frozenset(
    {"creation_time", "hit_count", "priority", "_tlru_cached_prefix_len", "_tlru_history_len"}
)
"""Node fields that sglang reads only in an eviction strategy other than LRU (FIFO / FILO:
``creation_time``; LFU / SLRU: ``hit_count``; priority: ``priority``; T-LRU: the ``_tlru``
lengths) and, for ``hit_count``, in the write-through threshold of HiCache or an external
cache linker; otherwise only to compute their own next values (a split copies them, an
insert raises ``priority`` to a max). Left out while the tree core's strategy is LRU and
neither is enabled."""
_UNIQUE = itertools.count()


@dataclasses.dataclass(frozen=True)
class _Mark:
    """A number renamed once the whole picture is taken: a stamp, a uuid, a node id."""

    kind: str
    value: Any


class TreePicture:
    """The whole state of a unified cache on the Python tree core, in canonical terms, and a
    name for each handle (``canonical_state``; SPEC.md "The canonical state").

    Every ``UnifiedTreeNode`` is named by its place: the tree's nodes first, root first,
    parents before children, children in each node's own order (which a walk, a match and
    an eviction read); then the sentinels of each LRU list (device lists, then host lists, in
    their own order: head, tail, middle, cursor); then any other node the picture meets
    (none, unless a node is kept after leaving the tree). Each node is pictured with all its
    fields, in their own order, but its id (its place names it) and the fields of
    ``STRATEGY_ONLY`` where nothing reads them: parent and children by place (the children
    dict with its keys), key, every component's data (KV indices, lock counts, metadata,
    host values, session refs), stamps as dense ranks (``STAMPS``), and its LRU links
    (``lru_prev`` / ``lru_next``, by place), which are every list's order, sentinels
    included. Lock-segment uuids (``UUID_KEYS``) are ranked among the live ones, those in the
    nodes' metadata and in the handles' receipts together; a node id anywhere sglang keeps
    one (``NODE_ID_FIELDS``, ``ID_KEYED``, ``ID_VALUED``, the handles) is its node's place,
    or "gone" (ranked among gone ids: never reused, each found nowhere).

    Then everything else reachable from the adapter, field by field in their own order (a
    dict's items in their order, a set's sorted, every object numbered where first met, so
    that two fields naming one object show it): the tree core's arena, LRU lists, evictable
    leaf sets, size counters and flags, the components, the cache's own state (sessions,
    HiCache and prefetch bookkeeping: empty on these paths, and pictured as they are), and the
    adapter's stand-ins (an allocator's free-pair buffer and SWA mapping, a slot pool's
    count). The kit's host is named, not entered; code by its name; an object whose state
    cannot be read (an iterator) makes the picture unique, so such a state never merges.

    Left out: sglang's global counters (the access clock, the node id and uuid counters:
    each new value is above every live one, which the ranks keep); the stamps of the root
    and of the LRU sentinels unless an evictable leaf set holds them (stamps are compared
    only between eviction candidates, the leaves of those sets, which the root, locked for
    good, and the sentinels, outside the tree, never are); each component's
    ``_evict_device_*`` fields outside an eviction walk (set by ``evict_device_start``
    before any read, emptied by ``evict_device_end``); the FULL component's lazily bound
    ``session_ref_eviction_strategy`` while it is unbound or bound to the tree core's own
    strategy (``_ensure_eviction_strategy`` binds exactly that before reading it);
    ``STRATEGY_ONLY`` as it says; and what the adapter names in ``leave_out`` (and pictures
    itself, ``own``).
    """

    def __init__(
        self, adapter: UnifiedAdapter, kit: Sequence[Any], leave_out: frozenset[str]
    ) -> None:
        self.adapter, self.core = adapter, adapter.core
        self.node_type = type(self.core.root_node)
        self.kit = {id(k) for k in kit}
        self.leave_out = leave_out
        strategy = self.core.eviction_strategy
        reads_strategy_fields = (
            type(strategy).__name__ != "LRUStrategy"
            or self.core.enable_hicache
            or self.core.enable_external_cache_linker
        )
        self.node_skip = frozenset({"id"}) | (
            frozenset() if reads_strategy_fields else STRATEGY_ONLY
        )
        self.nodes: list[Any] = []
        self.places: dict[int, int] = {}
        self.numbers: dict[int, int] = {}
        self.held: list[Any] = []  # what was numbered, alive until the picture is done
        self.marks: set[_Mark] = set()
        for node in self._tree():
            self.place(node)
        unranked = [self.core.root_node]
        for lists in (self.core.lru_lists, self.core.host_lru_lists):
            for lru in lists.values():
                for sentinel in (lru.head, lru.tail, lru.mid, lru.cursor):
                    if sentinel is not None:
                        self.place(sentinel)
                        unranked.append(sentinel)
        candidates = self.core.evictable_device_leaves | self.core.evictable_host_leaves
        self.unstamped = {id(n) for n in unranked if n not in candidates}

    def _tree(self) -> list[Any]:
        """The tree's nodes, root first, parents before children, children in order."""
        out: list[Any] = []
        seen: set[int] = set()
        stack = [self.core.root_node]
        while stack:
            node = stack.pop()
            if id(node) in seen:  # a node twice in the tree: placed once
                continue
            seen.add(id(node))
            out.append(node)
            stack.extend(reversed(node.children.values()))
        return out

    def place(self, node: Any) -> Hashable:
        at = self.places.get(id(node))
        if at is None:
            at = self.places[id(node)] = len(self.nodes)
            self.nodes.append(node)
        return ("node", at)

    def state(
        self, handles: Sequence[Any], own: Hashable = ()
    ) -> tuple[Hashable, tuple[Hashable, ...]]:
        """The picture and the handles' names (``own``: the adapter's picture of what it
        left out of the walk)."""
        rest = self.value(self.adapter)
        numbers, names = self.numbers, []
        for handle in handles:  # each alone: its name does not depend on the others
            self.numbers = {}
            names.append(self.value(handle, "node"))  # a bare int is a node id
        self.numbers = numbers
        pictured: list[Hashable] = []
        while len(pictured) < len(self.nodes):  # the list grows with every node first met
            pictured.append(self._node(self.nodes[len(pictured)]))
        table = self._table()
        picture = (tuple(pictured), rest, own)
        return _resolved(picture, table), _resolved(tuple(names), table)

    def indices(self) -> set[int]:
        """Every index a component of a node placed so far holds, device or host (before
        ``state``: the tree's nodes, the only ones the canary walk reads)."""
        out: set[int] = set()
        for node in self.nodes:
            for data in node.component_data:
                for held in (data.value, data.host_value):
                    if isinstance(held, torch.Tensor):
                        out.update(int(i) for i in held.flatten().tolist())
        return out

    def _node(self, node: Any) -> Hashable:
        fields: list[Hashable] = [("id", self._mark("id", node.id))]
        for name, value in vars(node).items():
            if name in self.node_skip:
                continue
            if name in STAMPS:
                if id(node) not in self.unstamped:
                    fields.append((name, self._mark("stamp", float(value))))
            else:
                fields.append((name, self.value(value, name)))
        return tuple(fields)

    def _mark(self, kind: str, value: Any) -> _Mark:
        mark = _Mark(kind, value)
        self.marks.add(mark)
        return mark

    def value(self, value: Any, field: str = "") -> Hashable:
        """One value in canonical terms (``field``: the name it is held under)."""
        kind = type(value)
        if kind in _SCALARS:
            return value  # type: ignore[no-any-return]  # a scalar is hashable
        if kind is int:
            return self._mark("id", value) if field in NODE_ID_FIELDS else value
        if kind is self.node_type:
            return self.place(value)
        if id(value) in self.kit:
            return ("kit", kind.__name__)
        how = _HOW.get(kind) or _how(kind)
        leaf = _LEAVES.get(how)
        if leaf is not None:
            return leaf(value)
        if how == "method":
            return ("method", value.__func__.__qualname__, self.value(value.__self__))
        if how == "namedtuple":  # immutable: by value
            return (
                "tuple",
                kind.__name__,
                *[(f, self.value(getattr(value, f), f)) for f in value._fields],
            )
        if how == "tuple":
            return ("tuple", *[self.value(v, field) for v in value])
        if how == "frozenset":
            return ("frozenset", *sorted([self.value(v) for v in value], key=repr))
        number = self.numbers.get(id(value))
        if number is not None:
            return ("ref", number)
        self.numbers[id(value)] = len(self.numbers)
        self.held.append(value)
        # the number is implicit: the objects first met, counted in the picture's order
        return self._first_met(value, how, field)

    def _first_met(self, value: Any, how: str, field: str) -> Hashable:
        """A container or object met for the first time, by what it holds."""
        name = type(value).__name__
        if how == "dict":
            return ("dict", name, self._default(value), *self._items(value, field))
        if how == "list":
            if len(value) > 4 and sum(v is None for v in value) * 2 > len(value):
                return ("sparse", name, len(value), *self._sparse(value, field))
            return ("list", name, *[self.value(v, field) for v in value])
        if how == "set":
            return ("set", *sorted([self.value(v) for v in value], key=repr))
        if how == "dataclass" and _at_defaults(value):
            for v in vars(value).values():  # numbered as if pictured: aliases still show
                if type(v) not in _SCALARS and type(v) is not int:
                    self.numbers.setdefault(id(v), len(self.numbers))
                    self.held.append(v)
            return ("object", name, "at its defaults")
        fields = self._fields(value)
        if fields is None:  # state Python cannot read (an iterator): never merged
            return ("unpicturable", name, next(_UNIQUE))
        return ("object", name, *fields)

    def _sparse(self, value: Any, field: str) -> list[Hashable]:
        """A list of mostly None (a node's LRU links): its other items with their places."""
        return [(at, self.value(v, field)) for at, v in enumerate(value) if v is not None]

    def _default(self, value: dict[Any, Any]) -> Hashable:
        factory = getattr(value, "default_factory", None)
        return None if factory is None else self.value(factory)

    def _items(self, value: dict[Any, Any], field: str) -> list[Hashable]:
        out: list[Hashable] = []
        keyed, valued, uuids = field in ID_KEYED, field in ID_VALUED, field in UUID_MAPS
        for key, item in value.items():
            k = self._mark("id", key) if keyed and type(key) is int else self.value(key)
            if type(item) is int and (valued or uuids or key in UUID_KEYS):
                out.append((k, self._mark("id" if valued else "uuid", item)))
            else:
                out.append((k, self.value(item)))
        return out

    def _fields(self, value: Any) -> list[Hashable] | None:
        """An object's fields in canonical terms, what no future reads left out; None for an
        object without readable fields."""
        held = getattr(value, "__dict__", None)
        slots = _slots(type(value))
        if held is None and not slots:
            return None
        pairs = list((held or {}).items())
        pairs += [(s, getattr(value, s)) for s in slots if hasattr(value, s)]
        skip = self._skip(value)
        return [(name, self.value(v, name)) for name, v in pairs if name not in skip]

    def _skip(self, value: Any) -> frozenset[str]:
        if value is self.adapter:
            return self.leave_out
        strategy = self.core.eviction_strategy
        if not hasattr(value, "is_evict_device_ongoing"):
            return frozenset()
        skip = set()  # a component: its eviction walk's fields, outside a walk
        if not value.is_evict_device_ongoing:
            skip |= {name for name in vars(value) if name.startswith("_evict_device_")}
        bound = getattr(value, "session_ref_eviction_strategy", None)
        if bound is None or bound == strategy.get_priority:
            skip.add("session_ref_eviction_strategy")
        return frozenset(skip)

    def _table(self) -> dict[_Mark, Hashable]:
        """Each mark's final name: stamps and uuids as dense ranks among their kind, node
        ids as places (the first placed, were two nodes to share one id), or "gone" ranked
        among the gone ones."""
        by_id: dict[int, Hashable] = {}
        for node in reversed(self.nodes):
            by_id[node.id] = ("node", self.places[id(node)])
        values: dict[str, set[Any]] = {"stamp": set(), "uuid": set(), "gone": set()}
        for mark in self.marks:
            kind = "gone" if mark.kind == "id" else mark.kind
            if kind != "gone" or mark.value not in by_id:
                values[kind].add(mark.value)
        ranks = {kind: {v: r for r, v in enumerate(sorted(vs))} for kind, vs in values.items()}
        table: dict[_Mark, Hashable] = {}
        for mark in self.marks:
            if mark.kind == "id" and mark.value in by_id:
                table[mark] = by_id[mark.value]
            else:
                kind = "gone" if mark.kind == "id" else mark.kind
                table[mark] = (kind, ranks[kind][mark.value])
        return table


_SCALARS = frozenset({type(None), bool, str, bytes, float})
_CODE = (types.FunctionType, types.BuiltinFunctionType, type, ModuleType)
_LEAVES: dict[str, Callable[[Any], Hashable]] = {
    "enum": lambda v: ("enum", type(v).__name__, v.name),
    "number": lambda v: ("number", type(v).__name__, v.item() if hasattr(v, "item") else v),
    "tensor": lambda v: ("tensor", str(v.dtype), _frozen(v.tolist())),
    "array": lambda v: ("array", v.typecode, tuple(v)),
    "torch": lambda v: ("torch", str(v)),
    "code": lambda v: ("code", getattr(v, "__qualname__", getattr(v, "__name__", ""))),
    "logger": lambda v: ("logger", v.name),
}
"""How each kind of leaf is pictured: by its value, never entered."""
_HOW: dict[type, str] = {}
_SLOTS: dict[type, list[str]] = {}


def _how(kind: type) -> str:
    """How a value of ``kind`` is pictured, decided once per type."""
    checks: list[tuple[type | tuple[type, ...], str]] = [
        (enum.Enum, "enum"),
        (numbers.Number, "number"),  # numpy's scalars, int subclasses
        (torch.Tensor, "tensor"),
        (array, "array"),
        ((torch.device, torch.dtype), "torch"),
        (types.MethodType, "method"),
        (_CODE, "code"),
        (logging.Logger, "logger"),
        (tuple, "tuple"),
        (frozenset, "frozenset"),
        (dict, "dict"),
        ((list, deque), "list"),
        (set, "set"),
    ]
    how = next((name for base, name in checks if issubclass(kind, base)), "object")
    if how == "tuple" and hasattr(kind, "_fields"):
        how = "namedtuple"
    if how == "object" and dataclasses.is_dataclass(kind):
        how = "dataclass"
    _HOW[kind] = how
    return how


def _at_defaults(value: Any) -> bool:
    """A dataclass whose every field holds its default (a component's data a node does not
    use): pictured as that, exactly."""
    fields = dataclasses.fields(value)
    if len(vars(value)) != len(fields):
        return False
    for field in fields:
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            return False
        held = getattr(value, field.name)
        if type(held) is not type(default) or held != default:
            return False
    return True


def _slots(kind: type) -> list[str]:
    found = _SLOTS.get(kind)
    if found is None:
        found = []
        for cls in kind.__mro__:
            slots = vars(cls).get("__slots__", ())
            names = [slots] if isinstance(slots, str) else list(slots)
            found += [s for s in names if s not in ("__dict__", "__weakref__")]
        _SLOTS[kind] = found
    return found


def _frozen(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value  # type: ignore[no-any-return]  # a scalar of the tensor


def _resolved(value: tuple[Any, ...], table: dict[_Mark, Hashable]) -> tuple[Hashable, ...]:
    """``value`` with each mark replaced by its name; a loop over each tuple (it runs on
    every state reached)."""
    out: list[Hashable] = []
    for item in value:
        kind = type(item)
        if kind is tuple:
            out.append(_resolved(item, table))
        elif kind is _Mark:
            out.append(table[item])
        else:
            out.append(item)
    return tuple(out)
