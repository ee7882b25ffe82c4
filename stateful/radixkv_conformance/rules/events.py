"""The ``events`` rule set: a router's view of the cache, rebuilt from its event stream.

After every step the kit takes the records the cache emitted since the step before
(``EventsAdapter.take_events``, in their wire form: tagged maps as vLLM 0.33 and sglang
0.5.23 send them, or tagged arrays in a layout — ``radixkv_spec.events.Layout``, sglang's
unless the oracle is told ``layout="vllm"``), decodes them by field name, applies them to
``radixkv_spec.events.EventStreamModel`` — which rejects a page stored twice without a
removal between (INV-40), a removal of a page that is not stored (INV-41) and, for
radixkv's hashes, a hash a router cannot recompute from the tokens and the namespace
(INV-42) — and compares the pages it rebuilt with the cache's contents (INV-43). With
another engine's own hashes (profile ``event_hashes="opaque"``) the hashes are only names,
and pages are compared by their token paths, namespaces aside.

An adapter claiming ``router_events`` also hands over the stream as a router receives it,
after the engine's filter (``PublishedEventsAdapter.take_published_events``). A second
oracle (``published=True``) applies those records to a model of its own, under the same
rules INV-40..42 (a removal there must name a page that was sent), and compares the pages
it rebuilt with the cached pages a router is told (``radixkv_spec.events.router_told``:
none of the ``""`` namespace, none with a token past u32 on its root path), INV-43.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple, cast

from hypothesis.stateful import invariant, precondition
from radixkv_spec.events import (
    EventStreamModel,
    HashPolicy,
    Layout,
    Stored,
    parse_record,
    told_positions,
)
from radixkv_spec.invariants import holds
from radixkv_spec.tokens import Position

from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.protocol import EventsAdapter, PagePlace, PublishedEventsAdapter

RAW_STREAM = "the event stream"
PUBLISHED_STREAM = "the published stream (after the engine's router filter)"


class Applied(NamedTuple):
    """What one check applied: its records, and the pages their ``BlockStored`` added."""

    records: int
    stored: int


class EventsOracle:
    """One cache's stream, applied after every step and compared with its contents.

    ``published``: the stream a router receives (``take_published_events``), compared with
    the cached pages a router is told; else the listener's whole stream (``take_events``).
    """

    def __init__(
        self,
        page_size: int,
        hashes: HashPolicy = "radixkv",
        layout: Layout = "sglang",
        published: bool = False,
    ) -> None:
        self.stream = EventStreamModel(page_size, hashes, layout)
        self.published = published

    def check(
        self, adapter: EventsAdapter | PublishedEventsAdapter, contents: Mapping[Any, Any]
    ) -> int:
        """Apply the new records and compare; returns how many records were applied."""
        return self.check_stream(adapter, contents).records

    def check_stream(
        self, adapter: EventsAdapter | PublishedEventsAdapter, contents: Mapping[Any, Any]
    ) -> Applied:
        """Apply the new records and compare (INV-40..43); what they applied."""
        records, stored = self._take(adapter), 0
        for wire in records:  # each record decoded and applied before the next is read
            record = parse_record(wire, self.stream.layout)
            self.stream.apply(record)
            stored += len(record.block_hashes) if isinstance(record, Stored) else 0
        expected = self._expected(page_places(contents))
        which = PUBLISHED_STREAM if self.published else RAW_STREAM
        if self.stream.hashes == "radixkv":
            rebuilt = self.stream.positions()
            holds(rebuilt == expected, "INV-43", _differ(which, rebuilt, expected))
        else:
            paths, cached = self.stream.path_counts(), Counter(path for _, path in expected)
            holds(paths == cached, "INV-43", _differ(which, set(paths.elements()), set(cached)))
        return Applied(len(records), stored)

    def _take(self, adapter: EventsAdapter | PublishedEventsAdapter) -> list[Any]:
        if self.published:
            return cast(PublishedEventsAdapter, adapter).take_published_events()
        return cast(EventsAdapter, adapter).take_events()

    def _expected(self, pages: set[PagePlace]) -> AbstractSet[Position]:
        """The pages the stream must rebuild: every cached one, or those a router is told."""
        return told_positions(pages) if self.published else pages


def page_places(contents: Mapping[Any, Any]) -> set[PagePlace]:
    """The cached pages of ``contents()``, whichever form the adapter returned."""
    return {(place[0], tuple(place[1])) for place in contents}


def _differ(which: str, rebuilt: Iterable[object], cached: Iterable[object]) -> str:
    stale, missing = set(rebuilt) - set(cached), set(cached) - set(rebuilt)
    cached_as = "the cache's pages a router is told" if which == PUBLISHED_STREAM else "the cache's"
    return (
        f"the pages rebuilt from {which} differ from {cached_as}: "
        f"{len(stale)} in the stream only (e.g. {sorted(map(str, stale))[:2]}), "
        f"{len(missing)} cached but not in the stream (e.g. {sorted(map(str, missing))[:2]})"
    )


class EventsRules(ConformanceMachine):
    """Capability ``events`` (with ``router_events``, the published stream too), beside the
    cache's mode: after every step, the pages a router rebuilds from the records since the
    step before are the cache's (INV-40..43)."""

    own_invariants = ("events_rebuild_the_pages",)

    def setup(self, page_size: int, window: int | None = None) -> None:
        super().setup(page_size, window)
        hashes, layout = self.profile.event_hashes, self.profile.event_layout
        self.page_stream = EventsOracle(page_size, hashes, layout)
        self.router_stream = (  # what a router receives: the stream after the engine's filter
            EventsOracle(page_size, hashes, layout, published=True)
            if self.has("router_events")
            else None
        )

    @precondition(ConformanceMachine._started)
    @invariant()
    def events_rebuild_the_pages(self) -> None:
        """The router's page set, rebuilt from the records since the last step, is the
        cache's; with ``router_events``, the one rebuilt from the published records is the
        cached pages a router is told."""
        with self.checking("invariant: the event stream rebuilds the cached pages"):
            contents = self.sut.contents()
            applied = self.page_stream.check_stream(self.sut, contents)
            self.session.stats["event records"] += applied.records
        if self.router_stream is None:
            return
        with self.checking("invariant: the published stream rebuilds the pages a router is told"):
            published = self.router_stream.check_stream(self.sut, contents)
            self.session.stats["published event records"] += published.records
            refused = applied.stored - published.stored  # stored, less what was published
            self.session.stats["published stream: pages refused by the router filter"] += refused
