"""radixkv's own adapters claim every capability their caches have (issue 39, item 7).

An adapter that leaves a capability out is never checked for it: the RadixTrie adapter once
claimed no ``events`` although the trie publishes them, so a tail trim whose pages were
never reported removed passed the kit. Each cache's features are read from the cache (its
constructor's keywords, its methods); each must be claimed by its adapter.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from radixkv_conformance.ledger import idle_host
from radixkv_conformance.targets import OWN, SHAPES, load

FEATURES = {  # what a cache offers -> the capability that checks it
    "event_listener": "events",
    "on_node_evict": "on_node_evict",
    "reset": "reset",
    "sliding_window_size": "swa",
}


def _cache(adapter: Any) -> Any:
    return getattr(adapter, "cache", None) or adapter.trie


def _features(cache: Any) -> set[str]:
    keywords = set(inspect.signature(type(cache).__init__).parameters)
    methods = {name for name in dir(cache) if callable(getattr(cache, name, None))}
    offered = keywords | methods
    if getattr(cache, "sliding_window_size", None) is None:
        offered.discard("sliding_window_size")  # the keyword exists; this cache runs without
    return offered & set(FEATURES)


@pytest.mark.parametrize(("label", "target"), SHAPES, ids=[label for label, _ in SHAPES])
def test_each_adapter_claims_what_its_cache_offers(label: str, target: str) -> None:
    factory, _ = load(target)
    adapter = factory(1, idle_host(1, 2))
    offered = {FEATURES[feature] for feature in _features(_cache(adapter))}
    assert offered <= adapter.capabilities, f"{label}: unclaimed {offered - adapter.capabilities}"


def test_the_trie_claims_its_events() -> None:
    factory, _ = load(dict(SHAPES)["RadixTrie"])
    assert "events" in factory(1, idle_host(1, 2)).capabilities


@pytest.mark.parametrize(("label", "target"), OWN, ids=[label for label, _ in OWN])
def test_each_adapter_with_events_claims_the_published_stream(label: str, target: str) -> None:
    """radixkv's publisher sends every cache's stream through ``RouterFilter``: an adapter
    that claims ``events`` claims ``router_events`` too, so the kit judges a router's view."""
    factory, _ = load(target)
    claims = factory(1, idle_host(1, 2)).capabilities
    if "events" in claims:
        assert "router_events" in claims, label


@pytest.mark.parametrize(("label", "target"), SHAPES, ids=[label for label, _ in SHAPES])
def test_a_sliding_window_adapter_shows_its_nodes(label: str, target: str) -> None:
    """Each of radixkv's trees is the adapter's to walk: with a window it claims
    ``node_boundaries``, so its SWA locks are judged on their exact extent, not a range."""
    factory, _ = load(target)
    adapter = factory(1, idle_host(1, 2))
    assert ("swa" in adapter.capabilities) == ("node_boundaries" in adapter.capabilities), label
