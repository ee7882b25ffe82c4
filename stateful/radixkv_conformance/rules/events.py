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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from radixkv_spec.events import EventStreamModel, HashPolicy, Layout
from radixkv_spec.invariants import holds

from radixkv_conformance.protocol import EventsAdapter, PagePlace


class EventsOracle:
    """One cache's stream, applied after every step and compared with its contents."""

    def __init__(
        self, page_size: int, hashes: HashPolicy = "radixkv", layout: Layout = "sglang"
    ) -> None:
        self.stream = EventStreamModel(page_size, hashes, layout)

    def check(self, adapter: EventsAdapter, contents: Mapping[Any, Any]) -> int:
        """Apply the new records and compare; returns how many records were applied."""
        records = adapter.take_events()
        for record in records:
            self.stream.apply_wire(record)
        pages = page_places(contents)
        if self.stream.hashes == "radixkv":
            rebuilt = self.stream.positions()
            holds(rebuilt == pages, "INV-43", _differ(rebuilt, pages))
        else:
            paths, cached = self.stream.path_counts(), Counter(path for _, path in pages)
            holds(paths == cached, "INV-43", _differ(set(paths.elements()), set(cached)))
        return len(records)


def page_places(contents: Mapping[Any, Any]) -> set[PagePlace]:
    """The cached pages of ``contents()``, whichever form the adapter returned."""
    return {(place[0], tuple(place[1])) for place in contents}


def _differ(rebuilt: Iterable[object], cached: Iterable[object]) -> str:
    stale, missing = set(rebuilt) - set(cached), set(cached) - set(rebuilt)
    return (
        "the pages rebuilt from the event stream differ from the cache's: "
        f"{len(stale)} in the stream only (e.g. {sorted(map(str, stale))[:2]}), "
        f"{len(missing)} cached but not in the stream (e.g. {sorted(map(str, missing))[:2]})"
    )
