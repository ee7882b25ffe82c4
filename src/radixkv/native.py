"""The compiled-helper boundary: radixkv._keys (C) when built and allowed, else nothing.

``pip install .`` builds ``radixkv._keys`` from ``_keys.c`` with the machine's C compiler
when it can (setup.py; optional). Its eight functions are declared here (``KeyHelpers``).
The pure-Python key path is the reference and the fallback: key_helpers.py (the per-token
loops the helpers replace), key_encoding.py and key_validation.py (which decide every key
the helpers cannot: they never raise a usage error themselves); keys.py's docstring pairs
each helper with its reference. The pure path runs when the extension is missing or
``RADIXKV_PURE=1``, so both builds behave identically, errors included.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

Ids = list[Any] | tuple[Any, ...]  # of Python ints, checked by the helpers


class KeyHelpers(Protocol):
    """What the compiled module provides: eight functions (types in _keys.pyi; semantics in
    _keys.c)."""

    def plain_ids(self, seq: Ids, end: int = ..., start: int = ..., /) -> bool:
        """Every item in [start, end) (default: all) is an exact int or bool in [0, 2**63)."""

    def pack(self, seq: Ids, start: int, end: int, /) -> bytes | None:
        """Items [start, end) as native int64 bytes; ``None`` if one is not a plain id."""

    def pack32(self, seq: Ids, start: int, end: int, /) -> bytes | None:
        """Items [start, end) as native int32 bytes; ``None`` unless all are plain and < 2**31."""

    def shared(self, stored: bytes, seq: Ids, start: int, end: int, /) -> int:
        """How many leading int64 ids of ``stored`` equal seq[start], ... before ``end``."""

    def widen(self, compact: bytes, /) -> bytes:
        """Native int32 ids as native int64 ones."""

    def narrow(self, packed: bytes | memoryview, /) -> bytes | None:
        """Native int64 ids as int32 ones; ``None`` if one is negative or >= 2**31."""

    def signs_clear(self, buffer: bytes | memoryview, start: int, /) -> bool:
        """No native int64 id of ``buffer`` from byte ``start`` on is negative."""

    def shared32(
        self, stored: bytes, probe: Ids | bytes | memoryview, start: int, end: int, /
    ) -> int:
        """``shared`` for int32 ``stored`` ids; ``probe`` a list, tuple or int64 buffer."""


_compiled: KeyHelpers | None
try:
    from radixkv import _keys as _compiled
except ImportError:  # not built (no compiler at install time): the pure path
    _compiled = None

helpers: KeyHelpers | None = None  # what the key modules use now; None: the pure path


def available() -> bool:
    """Whether the compiled helpers were built."""
    return _compiled is not None


def select(compiled: bool) -> bool:
    """Use the compiled helpers if ``compiled`` and they exist; returns whether in use.

    For tests and the benchmark, which compare both builds in one process; the default
    is decided once at import (``RADIXKV_PURE=1`` asks for the pure path).
    """
    global helpers
    helpers = _compiled if compiled else None
    return helpers is not None


select(compiled=os.environ.get("RADIXKV_PURE", "") != "1")
