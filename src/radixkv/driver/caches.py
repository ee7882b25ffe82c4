"""The caches a replay can drive: a small ``ReplayCache`` adapter per cache.

``CACHES`` holds radixkv's (``radixkv``: ``array('q')`` keys, the match limit a zero-copy
``memoryview`` slice; ``radixkv-list``: the seed API's ``list[int]``, which radixkv packs and
so validates once per call). A peer cache is handed in with ``register_cache``; the CLI
registers sglang's ``RadixCache``, built on the conformance kit's adapter, with
``sglang_factory``.
"""

from __future__ import annotations

import importlib.util
import sys
from array import array
from collections.abc import Callable
from typing import Any, Protocol

import torch

from radixkv.base import RadixKey
from radixkv.driver.pool import ReplayPool
from radixkv.events import EventListener
from radixkv.eviction import POLICIES
from radixkv.radix_cache import RadixCache


class ReplayCache(Protocol):
    name: str

    def prepare(self, tokens: list[int]) -> Any:
        """The key in the form this cache's callers hold it (untimed)."""

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        """(prefix_len, indices, node) of ``key[:limit]`` (radixkv: ``RadixKey(key,
        limit=limit)``, which reads the caller's list or array in place, as sglang's does)."""

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int: ...

    def lock(self, node: Any) -> Any: ...

    def unlock(self, node: Any, token: Any) -> None: ...

    def evict(self, num_tokens: int) -> int: ...

    def total_size(self) -> int: ...

    def evictable_size(self) -> int: ...


class RadixkvReplay:
    name = "radixkv"

    def __init__(
        self,
        page_size: int,
        pool: ReplayPool,
        policy: str = "lru",
        event_listener: EventListener | None = None,
    ) -> None:
        self.cache = RadixCache(
            page_size,
            token_to_kv_pool_allocator=pool,
            eviction_policy=policy,
            event_listener=event_listener,
        )

    def prepare(self, tokens: list[int]) -> Any:
        return array("q", tokens)

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        result = self.cache.match_prefix(RadixKey(key, extra_key, limit=limit))  # no copy
        return result.prefix_len, result.indices, result.last_node

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int:
        return self.cache.insert(RadixKey(key, extra_key), value, priority=priority).prefix_len

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node, token)

    def evict(self, num_tokens: int) -> int:
        return self.cache.evict(num_tokens).full_evicted

    def total_size(self) -> int:
        return self.cache.total_size()

    def evictable_size(self) -> int:
        return self.cache.evictable_size()


class RadixkvListReplay(RadixkvReplay):
    """radixkv handed the seed API's ``list[int]`` keys."""

    name = "radixkv-list"

    def prepare(self, tokens: list[int]) -> Any:
        return tokens


class SglangReplay:
    """sglang 0.5.23's Python ``RadixCache`` (``pip install --no-deps sglang==0.5.23``).

    ``sglang`` is a module exposing sglang's ``radix_cache`` and ``base`` modules (the
    conformance kit's sglang adapter is one: it loads the bare tree without sglang's
    server dependencies); see ``sglang_factory``.
    """

    name = "sglang"

    def __init__(self, page_size: int, pool: ReplayPool, sglang: Any) -> None:
        self._rc, self._base = sglang.radix_cache, sglang.base
        self.cache = self._rc.RadixCache.create_simulated(mock_allocator=pool, page_size=page_size)

    def prepare(self, tokens: list[int]) -> Any:
        return array("q", tokens)

    def match(self, key: Any, limit: int, extra_key: str | None) -> tuple[int, Any, Any]:
        params = self._base.MatchPrefixParams(key=self._rc.RadixKey(key, extra_key, limit=limit))
        result = self.cache.match_prefix(params)
        node = result.last_device_node
        return result.device_prefix_len, self.cache.path_device_indices(node), node

    def insert(
        self, key: Any, extra_key: str | None, value: torch.Tensor, priority: int = 0
    ) -> int:
        """``priority`` is unused: sglang is replayed under its default policy, LRU."""
        params = self._base.InsertParams(key=self._rc.RadixKey(key, extra_key), value=value)
        return int(self.cache.insert(params).prefix_len)

    def lock(self, node: Any) -> Any:
        return self.cache.inc_lock_ref(node)

    def unlock(self, node: Any, token: Any) -> None:
        self.cache.dec_lock_ref(node)

    def evict(self, num_tokens: int) -> int:
        result = self.cache.evict(self._base.EvictParams(num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    def total_size(self) -> int:
        # Its two counters: sglang's own total_size() walks the whole tree, and the driver
        # asks after every request (the peak), which made a replay without eviction
        # quadratic (minutes at 20 000 requests).
        return int(self.cache.evictable_size() + self.cache.protected_size())

    def evictable_size(self) -> int:
        return int(self.cache.evictable_size())


CacheFactory = Callable[[int, ReplayPool], ReplayCache]  # (page_size, pool) -> cache

CACHES: dict[str, CacheFactory] = {
    "radixkv": RadixkvReplay,
    "radixkv-list": RadixkvListReplay,
}


POLICY_CACHES: dict[str, type[RadixkvReplay]] = {
    "radixkv": RadixkvReplay,
    "radixkv-list": RadixkvListReplay,
}
"""The caches ``--policy`` (radixkv's eviction policies, eviction.py) and ``--events`` apply to."""


def cache_factory(
    cache_name: str, policy: str | None = None, events: EventListener | None = None
) -> CacheFactory:
    """The factory of ``cache_name``, built with eviction ``policy`` (``None``: its own
    default) and an event listener; either for a cache without them is a ValueError."""
    if policy is None and events is None:
        return CACHES[cache_name]
    if cache_name not in POLICY_CACHES:
        wanted = "--policy" if policy is not None else "--events"
        raise ValueError(f"{wanted} applies to {sorted(POLICY_CACHES)}, not {cache_name!r}")
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {sorted(POLICIES)}")
    kind = POLICY_CACHES[cache_name]
    return lambda page_size, pool: kind(page_size, pool, policy or "lru", events)


def register_cache(name: str, factory: CacheFactory) -> None:
    """Make ``factory`` replayable as ``name`` (``replay(name, ...)``, ``--cache name``)."""
    CACHES[name] = factory


SGLANG_WHEEL = "pip install --no-deps sglang==0.5.23"
Requirement = tuple[str, str]
"""A module a cache's factory imports when it is first called, and what installs it."""


class _SglangFactory:
    """``SglangReplay`` over the sglang modules ``load()`` returns, loaded on first use."""

    requires: tuple[Requirement, ...] = (("sglang", SGLANG_WHEEL),)

    def __init__(self, load: Callable[[], Any]) -> None:
        self.load = load

    def __call__(self, page_size: int, pool: ReplayPool) -> ReplayCache:
        return SglangReplay(page_size, pool, self.load())


def sglang_factory(load: Callable[[], Any]) -> CacheFactory:
    """A factory of ``SglangReplay`` whose sglang modules ``load()`` returns, on first use
    (it ``requires`` sglang's wheel: ``missing_requirements``)."""
    return _SglangFactory(load)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported; a bare package shell that
    an adapter's loader put in ``sys.modules`` counts, a ``None`` there blocks it)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def missing_requirements(cache_name: str) -> list[Requirement]:
    """What replaying ``cache_name`` would import and is not installed: the ``requires``
    of its factory (``(module, what installs it)`` pairs) whose module is absent. A check
    before a replay starts, so that a missing peer stops it before any work, not after."""
    needs: tuple[Requirement, ...] = getattr(CACHES[cache_name], "requires", ())
    return [(module, hint) for module, hint in needs if not installed(module)]
