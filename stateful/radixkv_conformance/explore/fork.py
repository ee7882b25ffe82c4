"""Branching a state: a deep copy that is fast on the objects a cache is made of.

Every transition the explorers run starts from a copy of its parent state: the machine, the
spec model, the adapter and the engine behind it. ``copy.deepcopy`` spent 40 % of an
exploration on that (a Python call, a dispatch and a ``__reduce_ex__`` round trip per
object, plus about 17 µs per torch tensor). ``fork`` copies the same graph with the same
meaning, several times faster:

- scalars, strings and other immutable leaves are returned as they are, without a call;
- lists, dicts, sets and tuples are copied by type, element by element;
- an object whose class copies the default way (no ``__deepcopy__``, ``__reduce__``,
  ``__getstate__`` or ``__setstate__`` of its own, nothing in ``copyreg``) is rebuilt from
  its ``__dict__`` and slots, as ``copy.deepcopy`` would rebuild it;
- a torch tensor (where torch is loaded) is copied with its storage once per storage, so
  views that shared memory still share it in the copy; a ``torch.device``, and a subclass of
  ``bytes``, ``str`` or a number that holds nothing else, is immutable and kept as it is;
- a bound method follows its owner (``ids.append`` on a copied ``ids`` appends to the copy:
  two branches never share a list through a callback);
- anything else goes to ``copy.deepcopy`` with the same memo, so sharing and cycles hold
  across both.

The memo works as ``copy.deepcopy``'s does: an object listed in it maps to what the copy
holds instead (the machine's Hypothesis parts, its profile: shared, never copied).
"""

from __future__ import annotations

import copy
import copyreg
import sys
import types
import weakref
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import is_not
from typing import Any, TypeVar

ATOMIC: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        range,
        type,
        types.FunctionType,
        types.CodeType,
        type(Ellipsis),
        type(NotImplemented),
        property,
        weakref.ref,
    }
)
"""What ``copy.deepcopy`` returns as it is (builtin methods aside: they follow their owner)."""

Memo = dict[int, Any]
T = TypeVar("T")
Copier = Callable[["_Fork", Any], Any]


def fork(value: Any, memo: Memo | None = None) -> Any:
    """A deep copy of ``value``; ``memo`` (``id(original) -> replacement``) as in
    ``copy.deepcopy``, and filled the same way."""
    with _bound_builtins_follow_their_owner():
        return _Fork({} if memo is None else memo).copy(value)


class _Fork:
    """One copy: the memo it fills and the storages of the tensors it copied."""

    def __init__(self, memo: Memo) -> None:
        self.memo = memo
        self.storages: dict[tuple[Any, int], Any] = {}  # a storage's copy, or a tensor's

    def copy(self, value: Any) -> Any:
        cls = type(value)
        if cls in ATOMIC:
            return value
        found = self.memo.get(id(value), _MISSING)
        if found is not _MISSING:
            return found
        return _copier(cls)(self, value)

    def item(self, value: Any) -> Any:
        """``copy`` inlined for the leaves a container mostly holds."""
        return value if type(value) in ATOMIC else self.copy(value)

    def keep(self, original: Any, new: T) -> T:
        self.memo[id(original)] = new
        return new


_MISSING = object()


def _list(f: _Fork, value: list[Any]) -> list[Any]:
    new = f.keep(value, [])
    new.extend([f.item(v) for v in value])
    return new


def _dict(f: _Fork, value: dict[Any, Any]) -> dict[Any, Any]:
    new = f.keep(value, type(value)())
    for k, v in value.items():
        new[f.item(k)] = f.item(v)
    return new


def _defaultdict(f: _Fork, value: defaultdict[Any, Any]) -> defaultdict[Any, Any]:
    new: defaultdict[Any, Any] = f.keep(value, defaultdict(f.item(value.default_factory)))
    for k, v in value.items():
        new[f.item(k)] = f.item(v)
    return new


def _set(f: _Fork, value: set[Any]) -> set[Any]:
    new = f.keep(value, set())
    new.update([f.item(v) for v in value])
    return new


def _tuple(f: _Fork, value: tuple[Any, ...]) -> tuple[Any, ...]:
    items = [f.item(v) for v in value]
    made: tuple[Any, ...] | None = f.memo.get(id(value))
    if made is not None:  # a cycle through the tuple made it already
        return made
    if not any(map(is_not, items, value)):
        return value
    return f.keep(value, tuple(items))


def _frozenset(f: _Fork, value: frozenset[Any]) -> frozenset[Any]:
    items = [f.item(v) for v in value]
    if not any(map(is_not, items, value)):
        return value
    return f.keep(value, frozenset(items))


def _itself(f: _Fork, value: Any) -> Any:
    """An immutable value: the copy may hold the original."""
    return value


def _method(f: _Fork, value: types.MethodType) -> types.MethodType:
    return types.MethodType(value.__func__, f.copy(value.__self__))


def _builtin_method(f: _Fork, value: Any) -> Any:
    return _follow_owner(value, f.copy)


def _deepcopy(f: _Fork, value: Any) -> Any:
    return copy.deepcopy(value, f.memo)


_COPIERS: dict[type, Copier] = {
    list: _list,
    dict: _dict,
    OrderedDict: _dict,
    Counter: _dict,
    defaultdict: _defaultdict,
    set: _set,
    tuple: _tuple,
    frozenset: _frozenset,
    types.MethodType: _method,
    types.BuiltinMethodType: _builtin_method,
}


def _copier(cls: type) -> Copier:
    """How to copy an instance of ``cls`` (decided once per class)."""
    found = _COPIERS.get(cls)
    if found is None:
        found = _COPIERS[cls] = _copier_of_class(cls)
    return found


def _copier_of_class(cls: type) -> Copier:
    torch = sys.modules.get("torch")
    if torch is not None and cls is torch.Tensor:
        return _tensor
    if (torch is not None and cls is torch.device) or _immutable_scalar(cls):
        return _itself
    if not _copies_by_default(cls):
        return _deepcopy
    slots = slot_names(cls)
    has_dict = any("__dict__" in vars(base) for base in cls.__mro__ if base is not object)

    def rebuild(f: _Fork, value: Any) -> Any:
        new: Any = f.keep(value, object.__new__(cls))
        if has_dict:
            new.__dict__.update({k: f.item(v) for k, v in vars(value).items()})
        for name in slots:
            held = getattr(value, name, _MISSING)
            if held is not _MISSING:
                object.__setattr__(new, name, f.item(held))
        return new

    return rebuild


def _immutable_scalar(cls: type) -> bool:
    """A subclass of an immutable scalar type (``bytes``, ``str``, numbers) whose instances
    hold nothing else (no ``__dict__``, no slots): a packed key, say."""
    scalar = issubclass(cls, (bytes, str, int, float, complex)) and not issubclass(cls, bool)
    has_dict = any("__dict__" in vars(base) for base in cls.__mro__ if base is not object)
    return scalar and not has_dict and not slot_names(cls)


def _copies_by_default(cls: type) -> bool:
    """Whether ``copy.deepcopy`` would rebuild ``cls`` from its fields alone: no class of
    its MRO but ``object`` defines how it is copied, pickled or made."""
    defined = {name for base in cls.__mro__ if base is not object for name in vars(base)}
    return cls not in copyreg.dispatch_table and not defined & _COPY_HOOKS


_COPY_HOOKS = frozenset(
    {
        "__deepcopy__",
        "__reduce_ex__",
        "__reduce__",
        "__getstate__",
        "__setstate__",
        "__getnewargs_ex__",
        "__getnewargs__",
        "__new__",
    }
)


def slot_names(cls: type) -> tuple[str, ...]:
    """Every slot of ``cls`` and its bases, by the name ``getattr`` finds (mangled)."""
    names: list[str] = []
    for base in cls.__mro__:
        declared = vars(base).get("__slots__", ())
        for name in (declared,) if isinstance(declared, str) else declared:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{base.__name__.lstrip('_')}{name}"
            names.append(name)
    return tuple(names)


def _tensor(f: _Fork, value: Any) -> Any:
    """A plain strided tensor, with its storage copied once: views that shared memory
    share it in the copy too, as ``Tensor.__deepcopy__`` keeps them. A tensor that is its
    whole storage (the common case) is one ``clone()``."""
    torch = sys.modules["torch"]
    if value.requires_grad or value.layout is not torch.strided or vars(value):
        return copy.deepcopy(value, f.memo)
    storage = value.untyped_storage()
    key = (value.device, storage.data_ptr())
    copied = f.storages.get(key)
    whole = (
        value.storage_offset() == 0
        and value.is_contiguous()
        and value.numel() * value.element_size() == storage.nbytes()
    )
    if copied is None and whole:
        new = value.clone()
        f.storages[key] = new
        return f.keep(value, new)
    if copied is None:
        copied = f.storages[key] = storage.clone()
    elif isinstance(copied, torch.Tensor):  # the whole-storage clone of a first view
        copied = f.storages[key] = copied.untyped_storage()
    new = torch.empty((0,), dtype=value.dtype, device=value.device)
    new.set_(copied, value.storage_offset(), value.size(), value.stride())
    return f.keep(value, new)


@contextmanager
def _bound_builtins_follow_their_owner() -> Iterator[None]:
    """Make ``copy.deepcopy`` too rebind ``some_list.append`` to the copied list, for the
    objects ``fork`` hands it: it treats every builtin method as atomic, so a cache built
    with ``on_node_evict=ids.append`` would, once copied, still append to the original's
    list. Scoped to one copy; the explorers are single-threaded."""
    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]  # no public hook
    atomic = dispatch[types.BuiltinMethodType]
    dispatch[types.BuiltinMethodType] = _deepcopy_builtin_method
    try:
        yield
    finally:
        dispatch[types.BuiltinMethodType] = atomic


def _deepcopy_builtin_method(method: Any, memo: Memo) -> Any:
    return _follow_owner(method, lambda owner: copy.deepcopy(owner, memo))


def _follow_owner(method: Any, copied: Callable[[Any], Any]) -> Any:
    """``some_list.append`` as the copy's ``append``; a function of a module or a class
    (``len``, ``dict.fromkeys``) as it is."""
    owner = getattr(method, "__self__", None)
    if owner is None or isinstance(owner, (types.ModuleType, type)):
        return method
    return getattr(copied(owner), method.__name__)
