"""The rule set of a prefix cache without SWA or Mamba, against ``radixkv_spec.model``."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import MultipleResults, invariant, multiple, precondition, rule
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.pages import cached_len
from radixkv_spec.tokens import page_align

from radixkv_conformance.machines import ConformanceMachine, Step
from radixkv_conformance.protocol import Namespace, NoRoom, as_inserted, token_places
from radixkv_conformance.session import NodeRef, end_run
from radixkv_conformance.strategies import EVICT_AMOUNTS, TOKEN_ALPHABET, up_to

REFUSED = object()
"""The handle of an insert the cache refused for lack of room: the caller holds nothing, so
the rules put no handle in the bundle for it (a replay keeps it under its step, unused)."""


class PlainRules(ConformanceMachine):
    """A prefix cache without SWA or Mamba, against ``radixkv_spec.model``."""

    mode: ClassVar[str] = "plain"
    checks = ConformanceMachine.checks | {"priority"}
    invariant_names = (*ConformanceMachine.invariant_names, "agrees_with_spec")

    def new_model(self) -> PrefixCacheModel:
        profile = self.session.profile
        return PrefixCacheModel(
            self.page_size,
            profile.victims,
            refresh_on=profile.refresh_on,
            stores=profile.stores,
            eviction=profile.eviction,
            flat_report=profile.eviction_report == "flat",
        )

    # ---- steps ---------------------------------------------------------------------------

    def do_owned_insert(
        self, tokens: tuple[int, ...], namespace: Namespace, priority: int | None
    ) -> NodeRef:
        """Insert into a cache that allocates its own indices (profile ``allocation="cache"``).

        The cache reports the key's indices; its new ones are handed out by the cache (an
        index it freed earlier may come back). What it frees during the insert is an
        eviction to make room, checked like one while the key's cached prefix is held.

        A cache with a fixed pool (capability ``capacity``) may refuse the insert
        (``NoRoom``): exactly when the spec finds no room for the key's new pages
        (``PrefixCacheModel.room``, INV-15). A refusal changes nothing: the cache's snapshot
        is as before, it freed nothing, and the spec model is left as it was, so what it
        leaked shows in later steps too. The caller gets no handle (``REFUSED``).
        """
        step = self.log("insert", tokens=list(tokens), namespace=namespace, indices=[])
        options = {} if priority is None else {"priority": priority}
        step.update(options)
        with self.checking("insert"):
            p = self.page_size
            key = tokens[: page_align(len(tokens), p)]
            prefix = key[: cached_len(self.model.table(namespace), key, p)]
            needed, room = self.room_for(namespace, tokens)
            if room is not None and needed > room:
                step["expect"] = {"rejected": True}  # the spec's verdict: no room
            before = self.sut.snapshot() if room is not None else None
            seen = len(self.events)
            try:
                got = as_inserted(self.sut.insert(tokens, namespace, (), **options))
            except NoRoom:
                self.check_refusal(step, needed, room, before, seen)
                return self.ref(REFUSED, namespace, ())
            step["observed"] = {"indices": None if got.indices is None else list(got.indices)}
            if got.indices is None or len(got.indices) != len(key):
                self.require(False, f"INV-12: insert reported indices {got.indices}", "owned")
                end_run()  # the spec cannot follow an insert whose indices are unknown
            made_room = [g for kind, g in self.events[seen:] if kind == "free"]
            if made_room:
                self.evict_for_room(namespace, prefix, made_room)
            self.require(
                room is None or needed <= room,
                f"INV-15: insert accepted needing {needed} page(s) with {room} free or evictable",
                "accepted-without-room",
            )
            step["expect"] = {"prefix_len": len(prefix)}
            self.require(
                got.prefix_len is None or got.prefix_len == len(prefix),
                f"INV-12: prefix_len {got.prefix_len}, spec says {len(prefix)}",
            )
            self.adopt_cache_indices(tuple(got.indices[len(prefix) :]))
            self.model.insert(namespace, tokens, tuple(got.indices), **options)
            self.keys_seen.append(tokens)
            self.count("insert")
            return self.ref(got.handle, namespace, key)

    def adopt_cache_indices(self, new: tuple[int, ...]) -> None:
        """Record the indices a cache that allocates its own gave an insert's new pages: none
        may be one it caches already (INV-7; the spec cannot adopt it, so the run ends)."""
        cached = self.model.cached_indices()
        reused = sorted(i for i in new if i in cached)
        if reused:  # this run ends here, acknowledged or not
            self.require(False, f"INV-7: insert's new pages take cached {reused}", "shared")
            end_run()
        self.freed.difference_update(new)  # the cache reuses what it freed before
        self.hand_out(new)

    def room_for(self, namespace: Namespace, tokens: tuple[int, ...]) -> tuple[int, int | None]:
        """The pages an insert of ``tokens`` needs and those the spec finds for it in the
        cache's pool (``None``: a pool without a declared capacity never runs out). Under
        ``unaligned_tail="block"`` the tokens past the last full page take a block of
        their own while the insert runs."""
        if not self.has("capacity"):
            return 0, None
        needed, room = self.model.room(namespace, tokens, int(self.sut.capacity))
        tail = self.profile.unaligned_tail == "block" and len(tokens) % self.page_size > 0
        return needed + tail, room

    def check_refusal(
        self, step: Step, needed: int, room: int | None, before: Any, seen: int
    ) -> None:
        """The cache refused an insert for lack of room (``NoRoom``): right only when the
        spec finds no room, and it must have changed nothing (INV-15)."""
        step["observed"] = {"refused": True}
        with self.checking("insert: refusal"):
            self.require(
                room is not None and needed > room,
                f"INV-15: insert refused needing {needed} page(s) with {room} free or evictable",
                "with-room",
            )
            changed = self.sut.snapshot() != before
            freed = len(self.events) != seen
            self.require(not freed, "INV-15: a refused insert freed indices", "freed")
            self.require(not changed, "INV-15: a refused insert changed the cache", "changed")
            if changed or freed:  # acknowledged, but the cache holds a state the spec has not
                self.session.stats["runs ended: an acknowledged refusal changed the cache"] += 1
                end_run()  # so later findings are never consequences of it
            self.count("insert refused for room")

    def evict_for_room(
        self, namespace: Namespace, prefix: tuple[int, ...], groups: list[tuple[int, ...]]
    ) -> None:
        """Frees during an insert: an eviction of exactly what was freed, with the key's
        cached prefix held (the cache holds it while it allocates the rest)."""
        with self.checking("insert: eviction to make room"):
            if prefix:
                self.model.lock(namespace, prefix)
            try:
                freed = sum(map(len, groups))
                frees = [("free", group) for group in groups]
                self.model.apply_eviction(freed, frees, waive=self.waive)
                self.session.stats["tokens evicted to make room"] += freed
            finally:
                if prefix and self.model.handle_count(namespace, prefix):
                    self.model.unlock(namespace, prefix)

    # ---- rules ---------------------------------------------------------------------------

    @rule(target=ConformanceMachine.nodes, data=st.data())
    def insert(self, data: st.DataObject) -> NodeRef | MultipleResults[NodeRef]:
        """A caller with fresh indices for the whole key: it frees what the tree had."""
        namespace = self.draw_namespace(data)
        tokens = self.draw_tokens(data)
        indices = self.caller_indices(len(tokens))
        return held(self.do_insert(tokens, namespace, indices, **self.draw_priority(data)))

    @rule(target=ConformanceMachine.nodes, data=st.data())
    def extend_request(self, data: st.DataObject) -> NodeRef | MultipleResults[NodeRef]:
        """A caller that matched first: it reuses the tree's indices and adds fresh ones."""
        namespace = self.draw_namespace(data)
        tokens = self.draw_tokens(data) + self.draw_more_pages(data)
        self.do_match(tokens, namespace)
        matched = tuple(self.trace[-1]["expect"]["indices"])  # do_match checked the cache's
        value = matched + self.caller_indices(len(tokens) - len(matched))
        if self.profile.allocation == "cache":
            value = ()
        self.count("extend_request")
        return held(self.do_insert(tokens, namespace, value, **self.draw_priority(data)))

    @rule(num_tokens=EVICT_AMOUNTS)
    def evict(self, num_tokens: int) -> None:
        self.do_evict(num_tokens)

    def draw_more_pages(self, data: st.DataObject) -> tuple[int, ...]:
        """For a cache with a fixed pool (capability ``capacity``): up to one page more than
        the pool holds, to follow a key (none otherwise). A key drawn by chance seldom fills
        the pool past its cached prefix, and the allocation that must then be refused holds
        that prefix while it looks for room (``alloc-refused``)."""
        if not self.has("capacity"):
            return ()
        pages = data.draw(up_to(int(self.sut.capacity) + 1), label="more pages")
        if not pages:  # the explorers' representative draw: nothing more
            return ()
        return tuple(data.draw(exactly(pages * self.page_size), label="more tokens"))

    def caller_indices(self, n: int) -> tuple[int, ...]:
        """Fresh indices for an insert, or none where the cache allocates its own."""
        return self.allocate(n) if self.profile.allocation == "caller" else ()

    def draw_priority(self, data: st.DataObject) -> dict[str, int]:
        """An insert's eviction priority (capability ``priority``), else none passed."""
        if not self.has("priority"):
            return {}
        self.count("insert with a priority")
        return {"priority": data.draw(st.integers(-1, 2), label="priority")}

    # ---- invariants ----------------------------------------------------------------------

    @precondition(ConformanceMachine._started)
    @invariant()
    def agrees_with_spec(self) -> None:
        """The cache holds the spec's token -> index map and sizes, and every index has one
        owner (one walk of the cache per step serves both)."""
        with self.checking("invariant: agrees with the spec"):
            contents = token_places(self.sut.contents())
            expected = {
                (ns, path, offset): index
                for ns, path in self.model.positions()
                for offset, index in enumerate(self.model.pages[ns][path])
            }
            self.require(
                contents == expected, "INV-10: the cached token -> index map differs from the spec"
            )
            sizes, m = self.sut.sizes(), self.model
            self.require(sizes.total == m.total_size(), "INV-6: total_size differs from the spec")
            self.require(sizes.evictable == m.evictable_size(), "INV-6: evictable_size differs")
            self.require(sizes.protected == m.protected_size(), "INV-6: protected_size differs")
            self.require(
                sizes.evictable + sizes.protected == sizes.total, "INV-6: sizes do not add up"
            )
            self.count("invariant checks")
        with self.checking("invariant: every index has one owner"):
            held = list(contents.values())
            self.require(
                len(held) == len(set(held)), "INV-7: an index is cached at two positions", "shared"
            )
            self.require(
                not set(held) & self.freed, "INV-7: a cached index was freed", "cached-freed"
            )
            missing = self.given - set(held) - self.freed
            self.require(
                not missing, f"INV-7: indices leaked (neither cached nor freed): {missing}", "leak"
            )


@functools.cache
def exactly(n: int) -> st.SearchStrategy[list[int]]:
    """``n`` tokens of the small alphabet, built once."""
    return st.lists(TOKEN_ALPHABET, min_size=n, max_size=n)


def held(ref: NodeRef) -> NodeRef | MultipleResults[NodeRef]:
    """What an insert gives the caller: its handle, or nothing when it was refused."""
    return multiple() if ref.handle is REFUSED else ref
