"""Which cache a ``MODULE:FACTORY`` names, and radixkv's own: what ``radixkv check`` and
``radixkv check --exhaustive`` load (apart from the command line, which only parses)."""

from __future__ import annotations

import functools
import importlib
from typing import Any

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
    """The factory named ``MODULE:ATTR`` (with ``options``, from ``--option``, bound) and the
    profile its module declares for it."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise LookupError(f"expected MODULE:FACTORY, got {target!r}")
    module = importlib.import_module(module_name)
    if not hasattr(module, attr):
        raise LookupError(f"{module_name} has no {attr!r}")
    per_factory = getattr(module, "PROFILES", None)
    declared = per_factory.get(attr) if isinstance(per_factory, dict) else None
    if declared is None:
        declared = getattr(module, "PROFILE", None)
    factory = getattr(module, attr)
    if options:
        factory = functools.wraps(factory)(functools.partial(factory, **options))
    return factory, declared
