"""The picture of an engine's memory: every Python object reachable from its adapter.

The breadth-first exploration merges two states when their canonical forms are equal. For
an adapter without a ``canonical_state`` hook, the implementation's part of that form is its
``snapshot()``: a picture the adapter's author chose. A snapshot that leaves out something a
later answer depends on (an eviction order kept from one eviction to the next, a cursor, a
free list) merges states that differ, the exploration expands only one of them, and it
reports a fixpoint it did not reach. With ``memory=1`` in the bounds the form also holds
the memory itself:
each object reachable from the adapter, numbered in the order a walk first meets it, with
its fields in their own order and every reference to another object as that object's
number (a dict's items in their own order, which an engine may read: an LRU kept by
re-insertion; a set's in an order of their values, since a set of objects iterates by
address). Two states with equal pictures hold the same objects with the same fields, up to
the canonical form's order-preserving renaming of numbers (stamps, ids, KV indices).

It is not the default: an engine's memory also holds what no later answer reads (a clock
that only grows, counters, zero entries a dict keeps), and keyed by it a cache of a few
pages that reaches a fixpoint in 75 states under its snapshot runs past 16,000 (planted
``held_after_reset``, tokens=1,length=1,locks=1). It is the check of a snapshot: the same
bounds with and without it, the same findings.

What the walk does not enter: the kit's own objects (the host an adapter was given),
code (functions, methods, classes, modules), loggers, and objects with neither fields nor
slots (a compiled engine's tree, a lock), which are pictured by type. The snapshot stays
in the canonical form beside this picture for what Python cannot see.
"""

from __future__ import annotations

import enum
import functools
import logging
import types
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from radixkv_conformance.explore.fork import slot_names

_SCALARS = frozenset({type(None), bool, int, float, complex, bytes, str})
_CODE = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.ModuleType,
    type,
)


def memory_picture(root: Any, stops: tuple[type, ...]) -> tuple[Hashable, ...]:
    """One entry per object reachable from ``root`` (instances of ``stops`` not entered),
    in the order a breadth-first walk meets them; a walk, not a recursion: a linked free
    list of a thousand blocks is a thousand entries, not a thousand frames."""
    walk = _Walk(stops)
    walk.number(root)
    entries: list[Hashable] = []
    at = 0
    while at < len(walk.objects):
        value = walk.objects[at]
        kind: type = type(value)
        entries.append(_entry_of(kind)(walk, value))
        at += 1
    return tuple(entries)


Leaf = Callable[[Any], Hashable]
Entry = Callable[["_Walk", Any], Hashable]


class _Walk:
    def __init__(self, stops: tuple[type, ...]) -> None:
        self.stops = stops
        self.numbers: dict[int, int] = {}
        self.objects: list[Any] = []  # held, so no id is reused during the walk

    def number(self, value: Any) -> int:
        found = self.numbers.get(id(value))
        if found is None:
            found = self.numbers[id(value)] = len(self.objects)
            self.objects.append(value)
        return found

    def ref(self, value: Any) -> Hashable:
        """A field's value: a scalar as it is, an immutable tuple inline, a leaf by its
        value, anything else by the number of its own entry."""
        kind = type(value)
        if kind in _SCALARS:
            return value  # type: ignore[no-any-return]  # a scalar is hashable
        if kind is tuple:
            return ("tuple", *[self.ref(v) for v in value])
        if kind is frozenset:
            return ("frozenset", *[self.ref(v) for v in _ordered(value)])
        leaf = _leaf_of(kind, self.stops)
        if leaf is not None:
            return leaf(value)
        return ("ref", self.number(value))


_LEAVES: dict[tuple[type, tuple[type, ...]], Leaf | None] = {}


def _leaf_of(kind: type, stops: tuple[type, ...]) -> Leaf | None:
    """How a value of ``kind`` is pictured without an entry of its own (None: it has one),
    decided once per type."""
    key = (kind, stops)
    if key not in _LEAVES:
        _LEAVES[key] = _leaf(kind, stops)
    return _LEAVES[key]


def _leaf(kind: type, stops: tuple[type, ...]) -> Leaf | None:
    """Kit objects, code, enum members, loggers and number or text subclasses by what
    they are; arrays by their values; objects without fields by type (and a ``repr``
    that names no address)."""
    name = kind.__name__
    if issubclass(kind, stops):
        return lambda value: ("kit", name)
    if issubclass(kind, _CODE):
        return lambda value: ("code", getattr(value, "__qualname__", name))
    if issubclass(kind, enum.Enum):
        return lambda value: ("enum", name, value.name)
    if issubclass(kind, logging.Logger):
        return lambda value: ("logger", value.name)
    if issubclass(kind, (int, float, str, bytes)):
        return lambda value: (name, value)
    if _is_container_type(kind):
        return None
    if callable(getattr(kind, "tolist", None)):  # a tensor, an array
        return lambda value: ("array", _frozen(value.tolist()))
    if "__dict__" in dir(kind) or slot_names(kind):
        return None
    return lambda value: ("opaque", name, _text(value))


@functools.cache
def _entry_of(kind: type) -> Entry:
    """How an object of ``kind`` is listed: its items or its fields, decided once."""
    name = kind.__name__
    if issubclass(kind, dict):
        return lambda walk, value: (name, *[(walk.ref(k), walk.ref(v)) for k, v in value.items()])
    if issubclass(kind, (set, frozenset)):
        return lambda walk, value: (name, *[walk.ref(v) for v in _ordered(value)])
    if _is_container_type(kind):  # a list, a deque
        return lambda walk, value: (name, *[walk.ref(v) for v in value])
    slots = slot_names(kind)

    def fields(walk: _Walk, value: Any) -> Hashable:
        held = [(k, walk.ref(v)) for k, v in getattr(value, "__dict__", {}).items()]
        held += [(k, walk.ref(getattr(value, k))) for k in slots if hasattr(value, k)]
        return (name, *held)

    return fields


def _text(value: Any) -> str:
    text = repr(value)
    return "" if " at 0x" in text else text


def _is_container_type(kind: type) -> bool:
    """A container the walk lists item by item (a dict, a set, a list, a deque ...)."""
    return issubclass(kind, (dict, set, frozenset, list, tuple, deque))


def _ordered(items: Any) -> list[Any]:
    """A set's items in an order of their own values, not of their memory addresses (a
    set of objects iterates by address): scalars by value, objects by type and fields."""
    return sorted(items, key=_shallow)


def _shallow(value: Any) -> str:
    fields = getattr(value, "__dict__", None)
    if fields is None:
        return f"{type(value).__name__}:{value!r}"
    plain = sorted((k, v) for k, v in fields.items() if type(v) in _SCALARS)
    return f"{type(value).__name__}:{plain!r}"


def _frozen(value: Any) -> Hashable:
    """A ``tolist()`` as nested tuples."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value  # type: ignore[no-any-return]  # a scalar of the array
