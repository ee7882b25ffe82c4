"""The kit's ``events`` rule set: the stream rebuilt after every step, on radixkv and on
caches whose streams are broken on purpose."""

from __future__ import annotations

from typing import Any

import pytest
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters.radixkv import (
    MambaAdapter,
    RadixCacheAdapter,
    SlidingWindowAdapter,
    mamba,
    radix_cache,
    sliding_window,
)
from radixkv_conformance.profile import RADIXKV, RADIXKV_MAMBA, RADIXKV_SWA, Profile
from radixkv_conformance.protocol import (
    CAPABILITIES,
    CAPABILITY_PROTOCOLS,
    AdapterError,
    EventsAdapter,
    require_capabilities,
)
from radixkv_conformance.rules.events import EventsOracle, page_places
from radixkv_spec import SpecViolation

from tests.helpers import fixed_search

QUICK = fixed_search(25, 20)
NO_SHRINK = fixed_search(25, 20, shrink=False)


@pytest.mark.parametrize(
    ("factory", "profile"),
    [(radix_cache, RADIXKV), (sliding_window, RADIXKV_SWA), (mamba, RADIXKV_MAMBA)],
)
def test_radixkv_streams_exactly_what_it_caches(factory: Any, profile: Profile) -> None:
    report = run_conformance(factory, profile=profile, settings=QUICK)
    report.raise_for_failures()
    assert "events" in report.capabilities
    assert report.stats["event records"] > 10  # the rule ran and saw real traffic


class ForgetsRemovals(RadixCacheAdapter):
    """A recorder that loses its BlockRemoved records: the router keeps stale pages."""

    def take_events(self) -> list[Any]:
        return [r for r in super().take_events() if r["type"] != "BlockRemoved"]


class UnchainedHashes(RadixCacheAdapter):
    """Publishes hashes off by one bit (a different hash function, or an unchained one): a
    router cannot recompute them."""

    def take_events(self) -> list[Any]:
        records = super().take_events()
        for record in records:
            if record["type"] in ("BlockStored", "BlockRemoved"):
                record["block_hashes"] = [h ^ 1 for h in record["block_hashes"]]
        return records


@pytest.mark.parametrize(
    ("adapter", "invariants"),
    [(ForgetsRemovals, ("INV-43", "INV-40")), (UnchainedHashes, ("INV-42", "INV-40"))],
)
def test_a_broken_stream_is_a_finding(adapter: Any, invariants: tuple[str, ...]) -> None:
    report = run_conformance(adapter, settings=NO_SHRINK, name=adapter.__name__, max_failures=1)
    assert not report.passed
    assert report.failures[0].invariant in invariants, report.failures[0].message


def test_every_radixkv_adapter_claims_events() -> None:
    for adapter in (RadixCacheAdapter, SlidingWindowAdapter, MambaAdapter):
        assert "events" in adapter.capabilities


class _NoEvents:
    """An adapter claiming events without the method."""

    page_size = 1
    usage_errors = (ValueError,)
    capabilities = frozenset({"events"})

    def __getattr__(self, name: str) -> Any:
        if name == "take_events":
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def test_the_capability_is_declared_and_checked() -> None:
    assert "events" in CAPABILITIES
    assert CAPABILITY_PROTOCOLS["events"] == (EventsAdapter, {})
    with pytest.raises(AdapterError, match=r"claims capability 'events'.*take_events\(\)"):
        require_capabilities(_NoEvents())


class _Stream:
    def __init__(self, records: list[list[Any]]) -> None:
        self.records = records

    def take_events(self) -> list[list[Any]]:
        records, self.records = self.records, []
        return records


def test_the_oracle_compares_pages_both_ways() -> None:
    oracle = EventsOracle(1, hashes="opaque")
    stored = ["BlockStored", [7, 8], None, [1, 2], 1, None, "GPU"]
    assert oracle.check(_Stream([stored]), {(None, (1,), 0): 5, (None, (1, 2), 0): 6}) == 1
    with pytest.raises(SpecViolation, match=r"INV-43.*1 cached but not in the stream"):
        oracle.check(_Stream([]), {(None, (1,)): (5,), (None, (1, 2)): (6,), ("a", (3,)): (9,)})
    assert page_places({("a", (3,), 0): 1, ("a", (3,), 1): 2}) == {("a", (3,))}
