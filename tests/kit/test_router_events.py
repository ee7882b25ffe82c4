"""What a router receives: the stream after radixkv's ``RouterFilter`` (issue 39, item 7).

The kit once judged only the listener's raw records, so a filter bug (a removal naming a
page the filter refused to store, a refused page whose children are still sent) passed it.
Capability ``router_events`` hands it the published records too: a model of their own
rebuilds a router's view, which must be the cached pages ``router_told`` admits (INV-40..43).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters.radixkv import RadixCacheAdapter, radix_cache
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import (
    CAPABILITIES,
    CAPABILITY_PROTOCOLS,
    AdapterError,
    Host,
    PublishedEventsAdapter,
    require_capabilities,
)
from radixkv_conformance.registry import machine_for
from radixkv_spec.events import router_told, told_positions
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.situations import Transition, declared, reached, view_of

from radixkv.events import BlockRemoved, BlockStored, KVCacheEvent, RouterFilter
from tests.helpers import fixed_search

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

QUICK = fixed_search(60, 30)
NO_SHRINK = settings(QUICK, max_examples=300, phases=[Phase.explicit, Phase.generate])
PUBLISHED = "invariant: the published stream rebuilds the pages a router is told"
REMOVAL_OF_REFUSED = (
    "INV-41:invariant-the-published-stream-rebuilds-the-pages-a-router-is-told-unknown"
)
CHILD_OF_REFUSED = (
    "INV-40:invariant-the-published-stream-rebuilds-the-pages-a-router-is-told-orphan"
)


# ---- the spec's rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ns", "path", "told"),
    [
        (None, (1, 2), True),
        ("a", (0, 2**32 - 1), True),
        ("", (1, 2), False),  # a router reads an empty salt as no salt
        (None, (1, 2**32), False),  # past u32
        ("a", (2**32, 1), False),  # a page after an untold token is untold too
        (None, (True, 2), False),  # a bool is an int to Python, not an id on the wire
        (None, ((1, 2), 3), False),  # a bigram token: vLLM's schema has none
        (None, (-1,), False),
        (None, (), True),
    ],
)
def test_router_told_on_hand_cases(ns: str | None, path: tuple[Any, ...], told: bool) -> None:
    assert router_told(ns, path) is told


TOKENS = st.one_of(st.integers(0, 2**33), st.booleans(), st.tuples(st.integers(0, 3)))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([None, "", "a"]), st.lists(TOKENS, max_size=8), st.integers(1, 4))
def test_the_told_pages_are_prefix_closed(ns: str | None, path: list[Any], page_size: int) -> None:
    pages = [tuple(path[:end]) for end in range(page_size, len(path) + 1, page_size)]
    for longer, shorter in zip(pages[1:], pages, strict=False):
        assert not router_told(ns, longer) or router_told(ns, shorter)


def test_told_positions_are_the_cached_pages_less_the_untold() -> None:
    cached = [(None, (1,)), (None, (1, 2**32)), ("", (1,)), ("a", [3])]  # paths as lists too
    assert told_positions(cached) == {(None, (1,)), ("a", (3,))}


# ---- the capability -------------------------------------------------------------------------


def test_the_capability_is_declared_and_needs_events() -> None:
    assert "router_events" in CAPABILITIES
    assert CAPABILITY_PROTOCOLS["router_events"] == (PublishedEventsAdapter, {})
    assert "router_events" in RadixCacheAdapter.capabilities
    with pytest.raises(AdapterError, match=r"'router_events'.*needs 'events'"):
        machine_for("NoEvents", radix_cache, capabilities=frozenset({"router_events"}))


class _NoPublished:
    """An adapter claiming the published stream without the method."""

    page_size = 1
    usage_errors = (ValueError,)
    capabilities = frozenset({"events", "router_events"})

    def __getattr__(self, name: str) -> Any:
        if name == "take_published_events":
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def test_a_claim_without_the_method_is_refused() -> None:
    with pytest.raises(AdapterError, match=r"'router_events'.*take_published_events\(\)"):
        require_capabilities(_NoPublished())


def test_the_situation_is_declared_for_the_capability_and_reached_by_an_untold_token() -> None:
    assert "router-untold-token" in {s.name for s in declared({"router_events"})}
    assert "router-untold-token" not in {s.name for s in declared({"events"})}
    model = PrefixCacheModel(1)
    assert "router-untold-token" in _insert(model, "a", (1, 2**32))
    assert "router-untold-token" in _insert(model, "a", (1, 2**32, 3))  # a page below it
    assert "router-untold-token" not in _insert(model, "a", (1, 4))  # every token told
    assert "router-untold-token" not in _insert(model, "", (5, 6))  # the namespace aside
    assert "router-untold-token" not in _insert(model, "a", (1, 2**32))  # cached already


FRESH = itertools.count(100)  # KV indices never handed out before


def _insert(model: PrefixCacheModel, ns: str | None, tokens: tuple[int, ...]) -> list[str]:
    before = view_of(model)
    model.insert(ns, tokens, tuple(next(FRESH) for _ in tokens))  # the cached prefix's unused
    after = view_of(model)
    return reached(Transition("insert", before, after, 1, ns, tokens))


# ---- the kit on radixkv's filter, and on planted filter bugs -----------------------------


def test_radixkv_publishes_exactly_the_pages_a_router_is_told() -> None:
    report = run_conformance(radix_cache, profile=RADIXKV, settings=QUICK)
    report.raise_for_failures()
    assert "router_events" in report.capabilities
    assert report.stats["published event records"] > 10  # the rule ran on real traffic
    assert report.stats["published stream: pages refused by the router filter"] > 0


class RemovalNamesRefused(RouterFilter):
    """Forwards every removal whole: it names pages this filter refused to store."""

    def __call__(self, event: KVCacheEvent) -> KVCacheEvent | None:
        sent = super().__call__(event)  # keeps its refusals as they were
        return event if isinstance(event, BlockRemoved) else sent


class ChildrenOfRefusedSent(RouterFilter):
    """Judges a record by its own namespace and tokens only: a page after a refused one in
    an earlier record, whose own tokens are fine, is sent (a router cannot chain it)."""

    def _stored(self, event: BlockStored) -> BlockStored | None:
        sent = super()._stored(dataclasses.replace(event, parent_block_hash=None))
        return (
            None
            if sent is None
            else dataclasses.replace(sent, parent_block_hash=event.parent_block_hash)
        )


def _with_filter(bug: type[RouterFilter]) -> Any:
    def factory(page_size: int, host: Host) -> RadixCacheAdapter:
        adapter = RadixCacheAdapter(page_size, host)
        adapter.router_filter = bug()
        return adapter

    factory.__name__ = bug.__name__
    return factory


@pytest.mark.parametrize(
    ("bug", "finding"),
    [(RemovalNamesRefused, REMOVAL_OF_REFUSED), (ChildrenOfRefusedSent, CHILD_OF_REFUSED)],
)
def test_a_planted_filter_bug_is_found(bug: type[RouterFilter], finding: str) -> None:
    report = run_conformance(_with_filter(bug), settings=NO_SHRINK, max_failures=1)
    assert [f.finding for f in report.failures] == [finding], report.render()
    assert report.failures[0].check == PUBLISHED
