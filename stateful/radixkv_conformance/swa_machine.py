"""The SWA machine: RadixCache with a sliding window against ``radixkv_spec.swa``.

The machine plays the serving engine: it allocates indices (full and SWA KV both held), frees
the SWA KV of a request's old tokens itself before inserting (``swa_evicted_seqlen``), hands
the cache ownership of everything past ``prev_prefix_len``, and frees only its unaligned tail.
Every index has a full and an SWA state; after every step each is conserved (none leaked,
none freed twice, none freed while a lock needs it) and the cache agrees with the spec.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from radixkv_spec.swa import FreeEvent, Position, SlidingWindowModel
from radixkv_spec.tokens import page_align

import radixkv
from radixkv.tree import TreeNode, iter_subtree

Namespace = str | None
EventSink = Callable[[str, tuple[int, ...]], None]
PageState = tuple[tuple[int, ...], bool, bool]  # indices, tombstone, SWA-locked


class _EventAllocator:
    """Forwards ``free`` and ``free_swa`` to the harness as plain events."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.device = torch.device("cpu")

    def free(self, indices: torch.Tensor) -> None:
        self.sink("free", tuple(int(i) for i in indices.tolist()))

    def free_swa(self, indices: torch.Tensor) -> None:
        self.sink("free_swa", tuple(int(i) for i in indices.tolist()))


class SlidingWindowAdapter:
    """radixkv's RadixCache in SWA mode, seen through plain values."""

    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)

    def __init__(self, page_size: int, window: int, sink: EventSink) -> None:
        self.page_size = page_size
        self.cache = radixkv.RadixCache(page_size, window, _EventAllocator(sink))

    def match(self, tokens: tuple[Any, ...], ns: Any) -> tuple[tuple[int, ...], Any]:
        result = self.cache.match_prefix(radixkv.RadixKey(list(tokens), ns))
        return tuple(result.indices.tolist()), result.last_node

    def insert(
        self, tokens: tuple[Any, ...], ns: Any, indices: tuple[int, ...], prev: int, evicted: int
    ) -> tuple[int, Any]:
        value = torch.tensor(indices, dtype=torch.int64)
        key = radixkv.RadixKey(list(tokens), ns)
        result = self.cache.insert(key, value, prev_prefix_len=prev, swa_evicted_seqlen=evicted)
        return result.prefix_len, result.last_node

    def lock(self, handle: Any) -> Any:
        return self.cache.inc_lock_ref(handle)

    def unlock(self, handle: Any, token: Any) -> None:
        self.cache.dec_lock_ref(handle, token)

    def evict(self, num_tokens: Any, swa_num_tokens: Any) -> tuple[int, int]:
        result = self.cache.evict(num_tokens, swa_num_tokens)
        return result.full_evicted, result.swa_evicted

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> tuple[int, int, int, int, int]:
        c = self.cache
        return (
            c.evictable_size(),
            c.protected_size(),
            c.total_size(),
            c.swa_evictable_size(),
            c.swa_protected_size(),
        )

    def pages(self) -> dict[Position, PageState]:
        """Every cached page: its indices, whether it is a tombstone, whether SWA-locked."""
        out: dict[Position, PageState] = {}
        p = self.page_size
        stack: list[tuple[TreeNode, tuple[int, ...]]] = [(self.cache.root, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                below = path + cast(tuple[int, ...], child.tokens)
                assert child.value is not None
                values = child.value.tolist()
                for at in range(0, len(child), p):
                    state = (
                        tuple(values[at : at + p]),
                        child.swa_tombstone,
                        child.swa_lock_ref > 0,
                    )
                    out[(child.extra_key, below[: len(path) + at + p])] = state
                stack.append((child, below))
        return out

    def check(self) -> None:
        self.cache.check_invariants()

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (
                n.id,
                n.tokens,
                tuple(n.value.tolist()) if n.value is not None else None,
                n.lock_ref,
                n.swa_lock_ref,
                n.swa_tombstone,
                n.last_access_time,
            )
            for n in iter_subtree(self.cache.root)
        )
        return nodes, self.sizes()


@dataclass(frozen=True)
class Handle:
    node: Any
    position: Position
    born: int  # the machine's eviction epoch when it was taken
    resets: int


@dataclass(frozen=True)
class Held:
    handle: Handle
    token: Any


class SlidingWindowMachine(RuleBasedStateMachine):
    """RadixCache(sliding_window_size=W) against ``radixkv_spec.swa.SlidingWindowModel``."""

    windows: ClassVar[tuple[int, ...]] = (1, 2, 4, 8)
    page_sizes: ClassVar[tuple[int, ...]] = (1, 4)
    stats: ClassVar[Counter[str]] = Counter()

    handles = Bundle("handles")
    held = Bundle("held")

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self.page_size = data.draw(st.sampled_from(self.page_sizes), label="page_size")
        self.window = data.draw(st.sampled_from(self.windows), label="window")
        note(f"page_size={self.page_size} window={self.window}")
        self.model = SlidingWindowModel(self.page_size, self.window)
        self.events: list[FreeEvent] = []
        self.sut = SlidingWindowAdapter(self.page_size, self.window, self._receive)
        self.next_index = 0
        self.full_freed: set[int] = set()
        self.swa_freed: set[int] = set()
        self.keys_seen: list[tuple[int, ...]] = [()]
        self.epoch = 0
        self.deleted_at: dict[Position, int] = {}
        self.resets = 0
        # A caller either names every lock it undoes or none: None undoes the newest lock
        # on the node, so mixing the two styles on one node is the caller's own mix-up.
        self.unlock_by_id = data.draw(st.booleans(), label="unlock by swa_boundary_id")
        type(self).stats["runs"] += 1

    # ---- the ledger of every index's full and SWA state ---------------------------------

    def _receive(self, kind: str, indices: tuple[int, ...]) -> None:
        self.events.append((kind, indices))
        self._release(kind, indices, by="cache")

    def _release(self, kind: str, indices: tuple[int, ...], by: str) -> None:
        for i in indices:
            assert 0 <= i < self.next_index, f"INV-24: {by} freed {i}, never allocated"
            assert i not in self.full_freed, f"INV-24: {by} freed index {i} after its full KV"
            if kind == "free_swa":
                assert i not in self.swa_freed, f"INV-24: {by} freed the SWA KV of {i} twice"
            else:
                self.full_freed.add(i)
            self.swa_freed.add(i)

    def _allocate(self, n: int) -> tuple[int, ...]:
        out = tuple(range(self.next_index, self.next_index + n))
        self.next_index += n
        return out

    def _draw_tokens(self, data: st.DataObject) -> tuple[int, ...]:
        base = data.draw(st.sampled_from(self.keys_seen), label="base")
        cut = data.draw(st.integers(0, len(base)), label="cut")
        tail = data.draw(st.lists(st.integers(0, 2), max_size=4 * self.page_size), label="tail")
        return base[:cut] + tuple(tail)

    def _handle(self, node: Any, ns: Namespace, path: tuple[int, ...]) -> Handle:
        return Handle(node, (ns, path), self.epoch, self.resets)

    def _is_stale(self, h: Handle) -> bool:
        deleted = self.deleted_at.get(h.position, -1) > h.born and bool(h.position[1])
        return h.resets != self.resets or deleted

    def _expect_rejected(self, call: Callable[[], object], what: str) -> None:
        before, seen = self.sut.snapshot(), len(self.events)
        try:
            call()
        except self.sut.usage_errors:
            type(self).stats[f"rejected {what}"] += 1
        else:
            raise AssertionError(f"INV-14: {what} was accepted")
        assert self.sut.snapshot() == before, f"INV-14: rejected {what} changed the cache"
        assert len(self.events) == seen, f"INV-14: rejected {what} freed indices"

    # ---- operations ----------------------------------------------------------------------

    @rule(target=handles, data=st.data(), ns=st.sampled_from([None, "a"]))
    def insert(self, data: st.DataObject, ns: Namespace) -> Handle:
        """A request that freed its old SWA KV inserts, matching first (prev_prefix_len)."""
        tokens = self._draw_tokens(data)
        aligned = page_align(len(tokens), self.page_size)
        use_match = data.draw(st.booleans(), label="matched first")
        matched = self._match(tokens, ns) if use_match else ()
        value = matched + self._allocate(len(tokens) - len(matched))
        pages = data.draw(st.integers(0, aligned // self.page_size), label="swa evicted pages")
        evicted = max(pages * self.page_size, len(matched) if use_match else 0)
        own_swa_gone = tuple(i for i in value[len(matched) : evicted])
        self._release("free_swa", own_swa_gone, by="caller")
        seen = len(self.events)
        prefix_len, node = self.sut.insert(tokens, ns, value, len(matched), evicted)
        expected, freed, end = self.model.insert(ns, tokens, value, len(matched), evicted)
        assert prefix_len == expected, f"INV-12: prefix_len {prefix_len}, spec says {expected}"
        got = sorted(i for kind, ix in self.events[seen:] for i in ix if kind == "free")
        assert got == sorted(freed), f"INV-24: insert freed {got}, spec says {sorted(freed)}"
        assert all(kind == "free" for kind, _ in self.events[seen:]), "INV-24: insert free_swa"
        self._release("free", value[aligned:], by="caller")
        self.keys_seen.append(tokens)
        type(self).stats["insert"] += 1
        return self._handle(node, ns, tuple(tokens[:end]))

    def _match(self, tokens: tuple[int, ...], ns: Namespace) -> tuple[int, ...]:
        indices, _ = self.sut.match(tokens, ns)
        expected = self.model.match(ns, tokens)
        assert indices == expected, f"INV-23: match gave {indices}, spec says {expected}"
        return indices

    @rule(target=handles, data=st.data(), ns=st.sampled_from([None, "a"]))
    def match(self, data: st.DataObject, ns: Namespace) -> Handle:
        tokens = self._draw_tokens(data)
        indices, node = self.sut.match(tokens, ns)
        expected = self.model.match(ns, tokens)
        assert indices == expected, f"INV-23: match gave {indices}, spec says {expected}"
        type(self).stats["match"] += 1
        return self._handle(node, ns, tuple(tokens[: len(indices)]))

    @rule(target=held, h=handles)
    def lock(self, h: Handle) -> Held:
        if self._is_stale(h) or h.position in self.model.tombstones:
            self._expect_rejected(lambda: self.sut.lock(h.node), "lock of a dead or tombstone node")
            return Held(h, None)
        token = self.sut.lock(h.node)
        self.model.lock(h.position)
        type(self).stats["lock"] += 1
        return Held(h, token)

    @rule(lock=consumes(held))
    def unlock(self, lock: Held) -> None:
        h = lock.handle
        if (lock.token is None and h.position[1]) or self._is_stale(h):
            self._expect_rejected(lambda: self.sut.unlock(h.node, lock.token), "dead unlock")
            return
        self.sut.unlock(h.node, lock.token if self.unlock_by_id else None)
        self.model.unlock(h.position)
        type(self).stats["unlock"] += 1

    @rule(h=handles)
    def unlock_without_lock(self, h: Handle) -> None:
        if not h.position[1] or self.model.handles[h.position] or self._is_stale(h):
            return
        self._expect_rejected(lambda: self.sut.unlock(h.node, None), "unmatched unlock")

    @rule(swa_num_tokens=st.integers(1, 8))
    def free_sliding_window_kv(self, swa_num_tokens: int) -> None:
        """Phase 2 alone: tombstones appear under and above locked nodes, often."""
        self.evict(0, swa_num_tokens)

    @rule(num_tokens=st.integers(0, 24), swa_num_tokens=st.integers(0, 24))
    def evict(self, num_tokens: int, swa_num_tokens: int) -> None:
        locked = {q for q, (_, _, swa_locked) in self.sut.pages().items() if swa_locked}
        assert self.model.minimum_windows() <= locked, "INV-21: a lock's window is not SWA-locked"
        seen = len(self.events)
        full, swa = self.sut.evict(num_tokens, swa_num_tokens)
        outcome = self.model.apply_eviction(num_tokens, swa_num_tokens, self.events[seen:], locked)
        assert (full, swa) == (outcome.full_evicted, outcome.swa_evicted), "INV-11: counts"
        self.epoch += 1
        for position in outcome.deleted:
            self.deleted_at[position] = self.epoch
        type(self).stats["evict"] += 1

    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        """Drop everything, on one roll in eight (Hypothesis favours 0: not that one)."""
        if roll != 5:
            return
        seen = len(self.events)
        full, _ = self.model.reset()
        self.sut.reset()
        freed = sorted(i for kind, ix in self.events[seen:] for i in ix if kind == "free")
        assert freed == sorted(full), "INV-7: reset must free every cached index once"
        self.resets += 1
        type(self).stats["reset"] += 1

    @rule(data=st.data(), what=st.sampled_from(["token", "prev", "evicted", "counts"]))
    def bad_call(self, data: st.DataObject, what: str) -> None:
        tokens = self._draw_tokens(data) + (0,) * self.page_size
        value = tuple(range(len(tokens)))
        if what == "token":
            bad = (*tokens, -1)
            self._expect_rejected(lambda: self.sut.insert(bad, None, value, 0, 0), "bad token")
        elif what == "counts":
            self._expect_rejected(lambda: self.sut.evict(0, -1), "negative swa_num_tokens")
        elif self.page_size > 1:  # an unaligned offset would split a page
            args = (1, 0) if what == "prev" else (0, 1)
            call = lambda: self.sut.insert(tokens, None, value, *args)  # noqa: E731
            self._expect_rejected(call, f"unaligned {what}")

    # ---- invariants ----------------------------------------------------------------------

    def _started(self) -> bool:
        return hasattr(self, "sut")

    @precondition(_started)
    @invariant()
    def agrees_with_spec(self) -> None:
        pages = self.sut.pages()
        got = {q: (ix, tomb) for q, (ix, tomb, _) in pages.items()}
        want = {q: (ix, q in self.model.tombstones) for q, ix in self.model.pages.items()}
        assert got == want, "INV-23: pages or tombstones differ from the spec"
        evictable, protected, total, swa_evictable, swa_protected = self.sut.sizes()
        assert total == self.model.total_size(), "INV-6: total_size"
        assert protected == self.model.protected_size(), "INV-6: protected_size"
        assert evictable + protected == total, "INV-6: sizes do not add up"
        assert swa_evictable + swa_protected == self.model.live_size(), "INV-22: SWA sizes"
        type(self).stats["invariant checks"] += 1

    @precondition(_started)
    @invariant()
    def implementation_checks_itself(self) -> None:
        self.sut.check()

    @precondition(_started)
    @invariant()
    def full_and_swa_indices_are_conserved(self) -> None:
        live: set[int] = set()
        dead: set[int] = set()
        for ix, tomb, _ in self.sut.pages().values():
            (dead if tomb else live).update(ix)
        assert not (live | dead) & self.full_freed, "INV-24: a cached index was freed"
        assert not live & self.swa_freed, "INV-24: a live page's SWA KV was freed"
        assert dead <= self.swa_freed, "INV-24: a tombstone's SWA KV is still held"
        leaked = set(range(self.next_index)) - live - dead - self.full_freed
        assert not leaked, f"INV-24: indices leaked: {sorted(leaked)}"


def swa_machine(name: str = "SlidingWindowMachine") -> type[SlidingWindowMachine]:
    return type(name, (SlidingWindowMachine,), {"stats": Counter()})
