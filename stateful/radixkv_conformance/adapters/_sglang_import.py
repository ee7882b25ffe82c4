"""Import single modules of an installed sglang wheel without its serving stack.

sglang's package ``__init__`` files pull in triton, zmq, PIL, numpy and more. The prefix
trees need none of it, so the adapters register the parent packages as bare shells (a
module with a ``__path__`` and no code run) and replace the few modules the trees import
but never call on the paths the adapters drive with inert stubs. sglang's own modules are
then imported unmodified. Each adapter lists what it stubs, and why, in its docstring.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from radixkv_conformance.adapters._checkouts import register_shells

INSTALL_HINT = "pip install --no-deps sglang==0.5.23"
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    OverflowError,
    AssertionError,  # sglang checks its callers with assert
)
"""What sglang's trees (Python and Rust) raise for a call they refuse."""


class Stub(types.ModuleType):
    """A module whose every public attribute is an inert placeholder.

    A placeholder is a class that accepts any arguments, so it serves as a type
    annotation, a base class, and a function that is called but whose result is unused.
    """

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {"__init__": _accept_anything})


def _accept_anything(self: object, *args: object, **kwargs: object) -> None:
    """The placeholder's constructor: the stubbed call has no effect the tree relies on."""


def sglang_root() -> Path:
    """The directory holding the installed ``sglang`` package (found without importing it)."""
    shell = sys.modules.get("sglang")
    if shell is not None and getattr(shell, "__path__", None):
        return Path(next(iter(shell.__path__))).parent
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise ImportError(f"sglang is not installed ({INSTALL_HINT})")
    return Path(spec.origin).parent.parent


def import_module(name: str, shells: Iterable[str], stubs: Iterable[str]) -> Any:
    """Import sglang's ``name`` with ``shells`` as bare packages and ``stubs`` as stubs.

    A name already in ``sys.modules`` is left alone, so two adapters loaded in one process
    share what they both need.
    """
    if name in sys.modules:
        return sys.modules[name]
    register_shells(sglang_root(), shells)
    for module in stubs:
        sys.modules.setdefault(module, Stub(module))
    return importlib.import_module(name)
