"""Load pymllm's ``mem_cache`` submodules from a local checkout of its repository.

pymllm (UbiquitousLearning/mllm, folder ``pymllm/mem_cache``) is not on the package index,
and its ``pymllm/mem_cache/__init__.py`` imports ``memory_pool``, which needs CUDA kernels.
The prefix caches need neither: ``pymllm`` and ``pymllm.mem_cache`` are registered as bare
packages (a ``__path__`` into the checkout, no ``__init__`` run), then the cache modules are
imported unmodified. Nothing from pymllm is copied into radixkv; the user points at a
checkout with ``PYMLLM_SRC`` (the repository root, holding ``pymllm/``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from radixkv_conformance.adapters._checkouts import named_checkout, register_shells

ENV = "PYMLLM_SRC"
_PACKAGES = ("pymllm", "pymllm.mem_cache")


def checkout() -> Path:
    """The checkout named by ``PYMLLM_SRC``; ``ImportError`` saying how to get one."""
    unset = (
        f"pymllm is not installable from the package index: set {ENV} to a checkout of "
        "https://github.com/UbiquitousLearning/mllm (the folder holding pymllm/)"
    )
    return named_checkout(ENV, unset, Path("pymllm", "mem_cache", "radix_cache.py"))


def import_module(name: str) -> Any:
    """Import ``pymllm.mem_cache.<name>`` from the checkout, under bare parent packages."""
    full = f"pymllm.mem_cache.{name}"
    if full in sys.modules:
        return sys.modules[full]
    register_shells(checkout(), _PACKAGES)
    return importlib.import_module(full)
