"""Which cache a ``MODULE:FACTORY`` names, and radixkv's own: what ``radixkv check`` and
``radixkv check --exhaustive`` load (apart from the command line, which only parses)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from radixkv_conformance.protocol import AdapterBroken

OWN_MODULE = "radixkv_conformance.adapters"
SHAPES = (  # radixkv's caches of distinct shapes: what the explorers enumerate
    ("RadixCache", f"{OWN_MODULE}.radixkv:radix_cache"),
    ("RadixCache (SWA)", f"{OWN_MODULE}.radixkv:sliding_window"),
    ("MambaRadixCache", f"{OWN_MODULE}.radixkv:mamba"),
    ("ChunkCache", f"{OWN_MODULE}.chunk:factory"),
    ("RadixTrie", f"{OWN_MODULE}.max_trie:factory"),
)
OWN = (  # what ``radixkv check`` with no argument checks: (label, MODULE:FACTORY)
    *SHAPES,
    *(  # the eviction policies radixkv ships besides LRU (SPEC.md §6a)
        (f"RadixCache ({policy.upper()})", f"{OWN_MODULE}.radixkv:policy_{policy}")
        for policy in ("lfu", "fifo", "mru", "priority")
    ),
)
REPLAY_DEFAULT = {  # the radixkv cache a trace of each mode replays against by default
    "plain": f"{OWN_MODULE}.radixkv:radix_cache",
    "swa": f"{OWN_MODULE}.radixkv:sliding_window",
    "mamba": f"{OWN_MODULE}.radixkv:mamba",
}


def load(target: str, options: dict[str, str] | None = None) -> tuple[Any, Any]:
    """The factory named ``MODULE:ATTR`` or ``PATH.py:ATTR`` (with ``options``, from
    ``--option``, bound) and the profile its module declares for it. A module that is not
    there is a ``LookupError`` (the command line's mistake); one that is there but does not
    import is ``AdapterBroken``."""
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise LookupError(f"expected MODULE:FACTORY or PATH.py:FACTORY, got {target!r}")
    module = _imported(module_name)
    if not hasattr(module, attr):
        raise LookupError(f"{module_name} has no {attr!r}")
    per_factory = getattr(module, "PROFILES", None)
    declared = per_factory.get(attr) if isinstance(per_factory, dict) else None
    if declared is None:
        declared = getattr(module, "PROFILE", None)
    factory = getattr(module, attr)
    if not callable(factory):
        raise LookupError(f"{module_name}:{attr} is a {type(factory).__name__}, not a factory")
    if options:
        factory = functools.wraps(factory)(functools.partial(factory, **options))
    return factory, declared


def _imported(name: str) -> ModuleType:
    """The module ``name`` names: a dotted module name, or the path of a ``.py`` file (its
    folder goes first on ``sys.path``, so the adapter's own imports of its neighbours work)."""
    if name.endswith(".py"):
        return _from_file(Path(name))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(f"{error.name}.")):
            raise  # the module named is not there: a usage error, said as Python says it
        raise AdapterBroken(f"{name} does not import: {_said(error)}") from error
    except Exception as error:  # a syntax error, an exception at import
        raise AdapterBroken(f"{name} does not import: {_said(error)}") from error


def _from_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise LookupError(f"{path}: no such file")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
            return loaded
        raise LookupError(f"{path}: a module named {name!r} is loaded already; rename the file")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LookupError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise AdapterBroken(f"{path} does not import: {_said(error)}") from error
    return module


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"  # a SyntaxError's says its file and line
