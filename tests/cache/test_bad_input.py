"""Usage errors: every rejected call raises before any state change."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from radixkv import KVIndexAllocator, RadixCache, RadixKey, TokenTypeError, UsageError
from tests.conftest import CacheFactory
from tests.helpers import CacheHarness, snapshot

Call = Callable[[RadixCache], object]


def key_with_extra(extra_key: object) -> RadixKey:
    """A key whose namespace was overwritten after construction (the constructor checks)."""
    key = RadixKey([1, 2])
    key.extra_key = extra_key  # type: ignore[assignment]
    return key


def value_of(n: int) -> torch.Tensor:
    return torch.arange(1000, 1000 + n, dtype=torch.int64)


def insert_with(value: object) -> Call:
    return lambda c: c.insert(RadixKey([1, 2, 3, 4]), value)  # type: ignore[arg-type]


def both(key: RadixKey) -> list[Call]:
    return [lambda c: c.insert(key, value_of(len(key))), lambda c: c.match_prefix(key)]


BAD_TOKENS: dict[str, RadixKey] = {
    "negative": RadixKey([1, 2, -1]),
    "negative first": RadixKey([-7]),
    "too large": RadixKey([1, 2**63]),
    "str": RadixKey([1, "2"]),  # type: ignore[list-item]
    "float": RadixKey([1, 2.0]),  # type: ignore[list-item]
    "none": RadixKey([None]),  # type: ignore[list-item]
    "empty tuple": RadixKey([()]),
    "tuple with str": RadixKey([(1, "x")]),  # type: ignore[list-item]
    "tuple with negative": RadixKey([(1, -2)]),
    "float tensor": RadixKey(torch.tensor([1.0, 2.0])),  # type: ignore[arg-type]
}

TYPE_ERRORS = {"str", "float", "none", "tuple with str", "float tensor"}

CASES: list[tuple[str, Call, type[Exception]]] = [
    *(
        (f"{op} {name}", call, TokenTypeError if name in TYPE_ERRORS else UsageError)
        for name, key in BAD_TOKENS.items()
        for op, call in zip(("insert", "match"), both(key), strict=True)
    ),
    *(
        (f"{op} extra_key {bad!r}", call, TokenTypeError)
        for bad in (1, b"a", 2.5)
        for op, call in zip(("insert", "match"), both(key_with_extra(bad)), strict=True)
    ),
    ("insert a list key", lambda c: c.insert([1, 2]), TokenTypeError),  # type: ignore[arg-type]
    ("match a list key", lambda c: c.match_prefix([1, 2]), TokenTypeError),  # type: ignore[arg-type]
    ("value shorter than key", insert_with(value_of(3)), UsageError),
    ("empty value", insert_with(value_of(0)), UsageError),
    ("list value", insert_with([1, 2, 3, 4]), TokenTypeError),
    ("float value", insert_with(torch.arange(4, dtype=torch.float32)), TokenTypeError),
    ("bool value", insert_with(torch.ones(4, dtype=torch.bool)), TokenTypeError),
    ("complex value", insert_with(torch.zeros(4, dtype=torch.complex64)), TokenTypeError),
    ("2-D value", insert_with(value_of(8).reshape(2, 4)), TokenTypeError),
    ("0-D value", insert_with(torch.tensor(5)), TokenTypeError),
    ("bigram key without value", lambda c: c.insert(RadixKey([(1, 2), (3, 4)])), UsageError),
    ("unexpected insert kwarg", lambda c: c.insert(RadixKey([5]), value_of(1), foo=1), UsageError),
    ("negative evict count", lambda c: c.evict(-1), UsageError),
    ("negative swa evict count", lambda c: c.evict(1, -1), UsageError),
    ("float evict count", lambda c: c.evict(1.0), TokenTypeError),  # type: ignore[arg-type]
    ("str evict count", lambda c: c.evict("1"), TokenTypeError),  # type: ignore[arg-type]
    ("bool evict count", lambda c: c.evict(True), TokenTypeError),
    ("none evict count", lambda c: c.evict(None), TokenTypeError),  # type: ignore[arg-type]
]


@pytest.fixture
def populated(make_cache: CacheFactory) -> CacheHarness:
    """A cache with a split, two namespaces, a lock and computed hashes."""
    h = make_cache()
    h.put([1, 2, 3, 4])
    locked = h.put([1, 2, 9]).last_node
    h.put([1, 2], "ns")
    h.cache.inc_lock_ref(locked)
    h.cache.compute_node_hash(locked)
    return h


@pytest.mark.parametrize(("call", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_rejected_call_changes_nothing(
    populated: CacheHarness, call: Call, error: type[Exception]
) -> None:
    h = populated
    before = snapshot(h.cache)
    ticks = h.clock.ticks
    allocated = h.allocator.allocated_count()
    with pytest.raises(error):
        call(h.cache)
    assert snapshot(h.cache) == before
    assert h.clock.ticks == ticks, "a rejected call read the clock"
    assert h.allocator.free_calls == 0
    assert h.allocator.allocated_count() == allocated
    assert h.evicted_ids == []
    h.cache.check_invariants()


def test_every_usage_error_is_a_value_error() -> None:
    assert issubclass(UsageError, ValueError)
    assert issubclass(TokenTypeError, ValueError)
    assert issubclass(TokenTypeError, TypeError)


def test_a_bad_token_beyond_the_aligned_length_still_rejects_the_key() -> None:
    cache = RadixCache(page_size=4)
    with pytest.raises(UsageError):
        cache.insert(RadixKey([1, 2, 3, 4, -1]), value_of(5))
    assert cache.total_size() == 0


def test_an_error_names_the_offending_token() -> None:
    cache = RadixCache()
    with pytest.raises(TokenTypeError, match="token 2"):
        cache.match_prefix(RadixKey([1, 2, "x"]))  # type: ignore[list-item]
    with pytest.raises(UsageError, match="-5"):
        cache.match_prefix(RadixKey([1, -5]))


@pytest.mark.parametrize(
    ("page_size", "error"),
    [(0, UsageError), (-4, UsageError), (1.5, TokenTypeError), (True, TokenTypeError)],
)
def test_a_bad_page_size_is_rejected_at_construction(
    page_size: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="page_size"):
        RadixCache(page_size=page_size)  # type: ignore[arg-type]


def test_a_sliding_window_needs_an_allocator_with_free_swa() -> None:
    with pytest.raises(UsageError, match=r"free_swa"):
        RadixCache(sliding_window_size=4, token_to_kv_pool_allocator=KVIndexAllocator(8))
    with pytest.raises(UsageError, match=r"sliding_window_size"):
        RadixCache(sliding_window_size=0)
    assert RadixCache(sliding_window_size=None).supports_swa is False
    assert RadixCache(sliding_window_size=4).supports_swa is True


class MetaPool:
    """A pool on torch's "meta" device: a second device that every CPU-only machine has."""

    device = torch.device("meta")

    def free(self, indices: torch.Tensor) -> None:
        pass


def test_a_value_on_another_device_than_the_pool_is_rejected_or_moved() -> None:
    cache = RadixCache(token_to_kv_pool_allocator=MetaPool())
    cache.insert(RadixKey([1, 2]), torch.empty(2, dtype=torch.int64, device="meta"))
    try:
        cache.insert(RadixKey([1, 2, 3, 4]), torch.tensor([20, 21, 22, 23]))  # a CPU value
    except UsageError:
        assert cache.total_size() == 2  # rejected before any change: fine
        return
    result = cache.match_prefix(RadixKey([1, 2, 3]))
    assert result.prefix_len == 3
    assert result.indices.device == torch.device("meta")
