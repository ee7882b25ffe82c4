"""Load LightLLM's radix cache module from a local checkout of its repository.

LightLLM (ModelTC/lightllm) keeps its prefix cache in
``lightllm/server/router/dynamic_prompt/radix_cache.py``; ``LIGHTLLM_SRC`` names a checkout
(the folder holding ``lightllm/``). The parent packages are registered as bare packages (a
``__path__`` into the checkout, no ``__init__`` run: ``lightllm.server``'s imports the
router), then the module is imported unmodified. Nothing of LightLLM is copied into
radixkv. It imports two modules that are not the cache; each gets a stand-in
(``STUBS``), and nothing else is replaced:

* ``lightllm.common.mem_manager``, for one type annotation (``MemoryManager``, the
  ``mem_manager`` argument the kit never passes); the module imports the GPU stack (NCCL,
  triton kernels, device queries);
* ``lightllm.server.router.dynamic_prompt.shared_arr``, whose ``SharedArray`` keeps the
  cache's two counters (``tree_total_tokens_num``, ``refed_tokens_num``: a one-element
  ``int64`` array in ``.arr``) in a named POSIX shared-memory segment, for the router's
  read-only client in another process. The kit runs no router, and its explorer holds
  thousands of caches at once (every state of a breadth-first level): two segments each
  exhausted the process's descriptors, and segments of worker processes the explorer ends
  were left in ``/dev/shm``. The stand-in is the same ``.arr``, in process memory.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from radixkv_conformance.adapters._checkouts import named_checkout, register_shells

ENV = "LIGHTLLM_SRC"
MODULE = "lightllm.server.router.dynamic_prompt.radix_cache"
_PACKAGES = (
    "lightllm",
    "lightllm.common",
    "lightllm.server",
    "lightllm.server.router",
    "lightllm.server.router.dynamic_prompt",
)


class MemoryManager:
    """Stand-in for ``lightllm.common.mem_manager.MemoryManager``: a type annotation only."""


class SharedArray:
    """Stand-in for LightLLM's ``SharedArray``: the same zeroed ``arr``, in process memory
    (the name, which would name the shared segment, is kept for reading only)."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: Any) -> None:
        self.name = name
        self.arr = np.zeros(shape, dtype=dtype)


STUBS: dict[str, tuple[str, type]] = {
    "lightllm.common.mem_manager": ("MemoryManager", MemoryManager),
    "lightllm.server.router.dynamic_prompt.shared_arr": ("SharedArray", SharedArray),
}
"""Each stand-in module, with the one name the cache imports from it (module doc)."""


def checkout() -> Path:
    """The checkout named by ``LIGHTLLM_SRC``; ``ImportError`` saying how to get one."""
    unset = (
        f"LightLLM's radix cache is read from a checkout: set {ENV} to a clone of "
        "https://github.com/ModelTC/lightllm (the folder holding lightllm/)"
    )
    return named_checkout(ENV, unset, Path(*MODULE.split(".")).with_suffix(".py"))


def _register(root: Path) -> None:
    register_shells(root, _PACKAGES)
    for name, (attr, stand_in) in STUBS.items():
        if name not in sys.modules:
            stub = types.ModuleType(name, "radixkv's stand-in (see _lightllm_import)")
            setattr(stub, attr, stand_in)
            sys.modules[name] = stub


def radix_cache() -> Any:
    """LightLLM's ``radix_cache`` module, imported unmodified under bare parent packages."""
    if MODULE not in sys.modules:
        _register(checkout())
    return importlib.import_module(MODULE)
