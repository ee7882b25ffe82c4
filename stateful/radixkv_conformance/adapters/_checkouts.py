"""What the peer loaders share: the checkout an environment variable names, and bare packages.

A peer's package ``__init__`` files import its serving stack (GPU kernels, NCCL, an engine
config); its prefix cache needs none of it. A loader registers those packages as bare shells
(a module with a ``__path__`` into the checkout, no code run), then imports the cache's own
modules unmodified.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path


def named_checkout(env: str, unset: str, holding: Path, *, below: tuple[str, ...] = ()) -> Path:
    """The folder the environment variable ``env`` names, or the first of its subfolders
    ``below``, that holds the file ``holding``.

    ``ImportError`` saying how to get one: ``unset`` where ``env`` is unset, else what the
    folder lacks."""
    src = os.environ.get(env)
    if not src:
        raise ImportError(unset)
    root = Path(src).expanduser()
    folders = [root, *(root / sub for sub in below)]
    for folder in folders:
        if (folder / holding).is_file():
            return folder
    also = "".join(f" (nor {sub}/{holding.as_posix()})" for sub in below)
    raise ImportError(f"{env}={src} holds no {holding.as_posix()}{also}")


def register_shells(
    root: Path, packages: Iterable[str], shell: Callable[[str], types.ModuleType] = types.ModuleType
) -> None:
    """Each of ``packages`` not imported yet, as a bare package ``shell(name)`` whose
    ``__path__`` is its folder under ``root``. A package already in ``sys.modules`` is left
    alone, so two loaders in one process share what they both need."""
    for name in packages:
        if name not in sys.modules:
            package = shell(name)
            package.__path__ = [str(root.joinpath(*name.split(".")))]
            sys.modules[name] = package
