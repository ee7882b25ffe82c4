"""Load MAX's own ``RadixTrie`` (``max/pipelines/kv_cache/radix_trie.py``) from a checkout.

The trie left modular's main repository in March 2025; public mirrors keep it, e.g.
``swi/modular`` at ``b2c688496`` (``src/max/pipelines/kv_cache/radix_trie.py`` and
``simple_trie.py``, which it imports). ``MAX_SRC`` names a folder holding ``max/`` (a
modular checkout's ``src/``, or a copy of just those two files under
``max/pipelines/kv_cache/``); a modular checkout root is accepted too. The packages ``max``,
``max.pipelines`` and ``max.pipelines.kv_cache`` are registered bare (their ``__init__``
imports the whole MAX engine), then the two modules are imported unmodified. One stub:
``max.profiler``, a compiled part of MAX's wheel that no source mirror holds, whose
``traced`` decorator (tracing markers) becomes the identity. The trie needs numpy. Nothing
from MAX is copied into radixkv.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radixkv_conformance.adapters._checkouts import named_checkout, register_shells

ENV = "MAX_SRC"
_PACKAGES = ("max", "max.pipelines", "max.pipelines.kv_cache")
_TRIE = Path("max", "pipelines", "kv_cache", "radix_trie.py")


def checkout() -> Path:
    """The folder holding ``max/`` named by ``MAX_SRC``; ``ImportError`` saying how to get one."""
    unset = (
        f"MAX's RadixTrie is in no installable package: set {ENV} to a checkout of a "
        "public modular mirror that keeps it, e.g. https://github.com/swi/modular at "
        "b2c688496 (its src/ folder, holding max/pipelines/kv_cache/radix_trie.py)"
    )
    return named_checkout(ENV, unset, _TRIE, below=("src",))


def _traced(func: Any = None, **_: Any) -> Any:
    """``max.profiler.traced`` as the identity, bare (``@traced``) or called (``@traced()``)."""
    if callable(func):
        return func
    identity: Callable[[Any], Any] = lambda f: f  # noqa: E731
    return identity


def import_module(name: str) -> Any:
    """Import ``max.pipelines.kv_cache.<name>`` from the checkout, under bare packages."""
    full = f"max.pipelines.kv_cache.{name}"
    if full in sys.modules:
        return sys.modules[full]
    root = checkout()
    try:
        importlib.import_module("numpy")
    except ImportError as missing:
        raise ImportError(f"MAX's RadixTrie needs numpy (pip install numpy): {missing}") from None
    register_shells(root, _PACKAGES)
    if "max.profiler" not in sys.modules:
        profiler = types.ModuleType("max.profiler")
        profiler.traced = _traced  # type: ignore[attr-defined]  # the one name the trie imports
        sys.modules["max.profiler"] = profiler
    return importlib.import_module(full)
