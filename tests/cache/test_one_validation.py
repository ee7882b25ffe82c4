"""One validation for every cache (docs/decisions.md, 2026-11-28): ChunkCache, RadixCache and
MambaRadixCache refuse the same bad calls with the same error type, before any change.

A scheduler is written once and runs on whichever cache the server was started with, so a
caller bug that RadixCache reports must not pass silently under ChunkCache (issue 30).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from radixkv import (
    ChunkCache,
    MambaRadixCache,
    MambaTreeNode,
    RadixCache,
    RadixKey,
    UsageError,
    native,
)
from radixkv.base import BasePrefixCache
from tests.helpers import BUILDS, snapshot
from tests.helpers import key_build as build

Call = Callable[[BasePrefixCache], object]


def insert(key: RadixKey, value: object = None, **kwargs: Any) -> Call:
    """An insert as every cache of the family takes it (the state slot too: Mamba needs
    one for new tokens, the others check it and leave it to the caller)."""
    options = {"mamba_value": 0, **kwargs}
    return lambda c: c.insert(key, value, **options)  # type: ignore[arg-type]  # bad on purpose


def match(key: object, **kwargs: Any) -> Call:
    return lambda c: c.match_prefix(key, **kwargs)  # type: ignore[arg-type]  # bad on purpose


def renamed(extra_key: object) -> RadixKey:
    """A key whose namespace was replaced after construction (the constructor checks it)."""
    key = RadixKey([1, 2])
    key.extra_key = extra_key  # type: ignore[assignment]  # bad on purpose
    return key


KEY = RadixKey([1, 2])
BAD_KEYS: dict[str, object] = {
    "list key": [1, 2],
    "negative id": RadixKey([1, -2]),
    "id of 2**63": RadixKey([1, 2**63]),
    "str id": RadixKey([1, "2"]),  # type: ignore[list-item]
    "float id": RadixKey([1, 2.0]),  # type: ignore[list-item]
    "None id": RadixKey([None]),  # type: ignore[list-item]
    "empty bigram": RadixKey([()]),
    "bigram with a str": RadixKey([(1, "x")]),  # type: ignore[list-item]
    "float tensor key": RadixKey(torch.tensor([1.0, 2.0])),  # type: ignore[arg-type]
    "2-D tensor key": RadixKey(torch.tensor([[1, 2]])),  # type: ignore[arg-type]
    "extra_key 1": renamed(1),
    "extra_key bytes": renamed(b"a"),
}

CASES: dict[str, Call] = {
    **{f"insert, {name}": insert(key, torch.tensor([5, 6])) for name, key in BAD_KEYS.items()},  # type: ignore[arg-type]
    **{f"match, {name}": match(key) for name, key in BAD_KEYS.items()},
    # values (issue 30: ChunkCache took all of these)
    "float value": insert(KEY, torch.tensor([1.0, 2.0])),
    "2-D value": insert(KEY, torch.tensor([[1, 2]])),
    "bool value": insert(KEY, torch.tensor([True, False])),
    "complex value": insert(KEY, torch.zeros(2, dtype=torch.complex64)),
    "0-D value": insert(KEY, torch.tensor(5)),
    "list value": insert(KEY, [5, 6]),
    "short value": insert(KEY, torch.tensor([5])),
    "empty value": insert(KEY, torch.tensor([], dtype=torch.int64)),
    "bigram key, value None": insert(RadixKey([(1, 2), 3])),
    "bigram key, value None, one token": insert(RadixKey([(1, 2)])),
    "bad value and a bad id": insert(RadixKey([1, -2]), torch.tensor([1.0, 2.0])),
    "short value and a str id": insert(RadixKey([1, "x"]), torch.tensor([5])),  # type: ignore[list-item]
    # more indices than tokens (SPEC.md, insert: a usage error since issue 30)
    "long value": insert(KEY, torch.tensor([5, 6, 7])),
    "long value, limited key": insert(RadixKey([1, 2, 3], limit=2), torch.tensor([5, 6, 7])),
    "long value, empty key": insert(RadixKey([]), torch.tensor([5])),
    # keywords
    "unknown insert keyword": insert(KEY, torch.tensor([5, 6]), slot=3),
    "negative prev_prefix_len": insert(KEY, torch.tensor([5, 6]), prev_prefix_len=-1),
    "negative swa_evicted_seqlen": insert(KEY, torch.tensor([5, 6]), swa_evicted_seqlen=-1),
    "negative mamba_value": insert(KEY, torch.tensor([5, 6]), mamba_value=-1),
    "float mamba_value": insert(KEY, torch.tensor([5, 6]), mamba_value=1.0),
    "str priority": insert(KEY, torch.tensor([5, 6]), priority="high"),
    "int cow": match(KEY, cow=1),
    # counts
    "negative evict": lambda c: c.evict(-1),
    "negative swa evict": lambda c: c.evict(1, -1),
    "float evict": lambda c: c.evict(1.0),  # type: ignore[arg-type]
    "bool evict": lambda c: c.evict(True),
    # locks: a ChunkCache hands out no node, so any node is another cache's
    "lock a str": lambda c: c.inc_lock_ref("node"),
    "lock another cache's node": lambda c: c.inc_lock_ref(MambaTreeNode()),
    "unlock a str": lambda c: c.dec_lock_ref("node"),
    "unlock another cache's node": lambda c: c.dec_lock_ref(MambaTreeNode()),
    "unlock None with a boundary": lambda c: c.dec_lock_ref(None, swa_boundary_id=7),
    "unlock None, unknown keyword": lambda c: c.dec_lock_ref(None, boundary=1),
}


def _outcome(call: Call, cache: BasePrefixCache) -> type[BaseException] | None:
    try:
        call(cache)
    except Exception as error:
        return type(error)
    return None


@pytest.mark.parametrize("compiled", BUILDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_cache_refuses_the_same_call_with_the_same_error(compiled: bool, case: str) -> None:
    call = CASES[case]
    with build(compiled):
        radix, mamba = RadixCache(), MambaRadixCache()
        radix.insert(RadixKey([7, 8]), torch.tensor([70, 80]))
        mamba.insert(RadixKey([7, 8]), torch.tensor([70, 80]), mamba_value=1)
        before = snapshot(radix), snapshot(mamba)
        expected = _outcome(call, radix)
        assert expected is not None and issubclass(expected, UsageError), expected
        assert _outcome(call, mamba) is expected
        assert _outcome(call, ChunkCache()) is expected
        assert (snapshot(radix), snapshot(mamba)) == before  # refused before any change


@pytest.mark.parametrize("compiled", BUILDS)
def test_a_good_call_passes_every_cache(compiled: bool) -> None:
    """The other side of parity: what RadixCache takes, ChunkCache takes too."""
    good: list[Call] = [
        insert(RadixKey([1, 2, 3]), torch.tensor([5, 6, 7], dtype=torch.int32)),
        insert(RadixKey([(1, 2), 3]), torch.tensor([5, 6]), mamba_value=1),
        insert(RadixKey(torch.tensor([4, 2])), mamba_value=2),  # type: ignore[arg-type]  # a tensor key
        insert(RadixKey([1, 2], "ns"), torch.tensor([5, 6]), priority=-1, mamba_value=3),
        match(RadixKey([1, 2, 3]), cow=True),
        lambda c: c.dec_lock_ref(None, swa_boundary_id=c.inc_lock_ref(None)),
    ]
    with build(compiled):
        for cache in (RadixCache(), MambaRadixCache(), ChunkCache()):
            for call in good:
                call(cache)


BOTH_WRONG: dict[str, Call] = {
    "str id, short value": insert(RadixKey([1, "x", 3]), torch.tensor([5])),  # type: ignore[list-item]
    "str id, long value": insert(RadixKey([1, "x"]), torch.tensor([5, 6, 7])),  # type: ignore[list-item]
    "float id, float value": insert(RadixKey([1.5, 2]), torch.tensor([1.0, 2.0])),  # type: ignore[list-item]
    "negative id, long value": insert(RadixKey([1, -2]), torch.tensor([5, 6, 7])),
    "None id, list value": insert(RadixKey([None, 2]), [5, 6]),  # type: ignore[list-item]
}


@pytest.mark.skipif(not native.available(), reason="the C key helpers are not built")
@pytest.mark.parametrize("case", sorted(BOTH_WRONG))
@pytest.mark.parametrize(
    "make", [RadixCache, ChunkCache, MambaRadixCache], ids=lambda c: c.__name__
)
def test_a_bad_key_with_a_bad_value_names_the_key_on_both_builds(
    case: str, make: Callable[[], BasePrefixCache]
) -> None:
    """The compiled path checks a list's ids during its walk, the pure one when it reads
    the key: a value error waits for the key's exact checks, so both name the same fault."""
    seen = {}
    for compiled in (True, False):
        with build(compiled):
            try:
                BOTH_WRONG[case](make())
            except UsageError as error:
                seen[compiled] = (type(error), str(error))
    assert seen[True] == seen[False]
    assert "token" in seen[True][1]  # the key's fault, not the value's
