"""What the machines draw: small alphabets that make keys share pages, eviction targets,
bad values, and strategies built once (cheap to draw, not to build)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

BAD_NAMESPACES: Sequence[object] = (5, b"a", 1.5, ("a",))
TOKEN_ALPHABET = st.integers(0, 3)  # a small alphabet makes keys share pages
_ALPHABET_IDS = tuple(range(4))  # TOKEN_ALPHABET's values
EVICT_ALL = 1 << 20
"""An eviction target above any run's cache: memory pressure that takes every unlocked
leaf, so a victim the cache should have kept (a locked one) is reached however the cache
orders its victims."""
EVICT_AMOUNTS = st.one_of(st.integers(0, 40), st.just(EVICT_ALL))
BAD_NAMESPACE = st.sampled_from(BAD_NAMESPACES)


@functools.cache
def up_to(n: int, low: int = 0) -> st.SearchStrategy[int]:
    """``integers(low, n)``, built once: strategies are cheap to draw, not to build."""
    return st.integers(low, n)


@functools.cache
def tails(max_size: int, untold: tuple[int, ...] = ()) -> st.SearchStrategy[list[int]]:
    """Tokens of the small alphabet; with ``untold`` (profile ``untold_tokens``), one of
    those ids now and then: about one token in nine, so that a key often extends a cached
    path past one (the search alone draws them: the explorers' alphabet has none)."""
    if not untold:
        return st.lists(TOKEN_ALPHABET, max_size=max_size)
    # each small id twice over, each untold id once (shrinking picks 0)
    return st.lists(st.sampled_from(_ALPHABET_IDS * 2 + untold), max_size=max_size)


@functools.cache
def one_of(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)
