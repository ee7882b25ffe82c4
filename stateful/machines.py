"""The RadixCache state machine: an implementation and the spec, side by side.

Every rule does the same thing to the cache under test (through its adapter) and to the
spec's model, and compares what they say. After every step the invariants check that the
two hold the same token -> index map, that the sizes agree, that the implementation's own
``check()`` passes, and that every KV index has exactly one owner (INV-7): the machine plays
the serving engine that allocates indices, frees its duplicates after an insert and its
unaligned tail, and receives whatever the cache frees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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

from spec.hashing import page_hashes as spec_page_hashes
from spec.model import PrefixCacheModel
from spec.tokens import page_align
from stateful.adapter import AdapterFactory, Namespace, PrefixCacheAdapter

NAMESPACES = st.sampled_from([None, "", "a"])
BAD_TOKENS: Sequence[object] = (-1, -(2**40), 2**63, "7", 1.5, True, None)
BAD_NAMESPACES: Sequence[object] = (5, b"a", 1.5, ("a",))
TOKEN_ALPHABET = st.integers(0, 3)  # a small alphabet makes keys share pages
BAD_CALLS = {  # what the bad_call rule tries -> the method that builds the call
    "insert with a bad token": "_bad_token_insert",
    "match with a bad token": "_bad_token_match",
    "insert with a non-str extra_key": "_bad_namespace_insert",
    "match with a non-str extra_key": "_bad_namespace_match",
    "insert with a value shorter than the key": "_short_value",
    "evict a negative count": "_negative_evict",
}


@dataclass(frozen=True)
class NodeRef:
    """A handle the cache returned, the position it ends at, and the epoch it was taken."""

    handle: Any
    namespace: Namespace
    prefix: tuple[int, ...]
    born: int  # the spec's clock when the handle was taken
    resets: int  # how many resets had happened then


@dataclass(frozen=True)
class LockRef:
    node: NodeRef
    token: Any


class RadixCacheMachine(RuleBasedStateMachine):
    """Drives ``factory(page_size, free_sink)`` and ``spec.model.PrefixCacheModel``."""

    factory: ClassVar[AdapterFactory]
    page_sizes: ClassVar[Sequence[int]] = (1, 2, 4, 16)
    stats: ClassVar[Counter[str]] = Counter()

    nodes = Bundle("nodes")
    locks = Bundle("locks")

    # ---- setup and bookkeeping ---------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        page_size = data.draw(st.sampled_from(self.page_sizes), label="page_size")
        self.page_size = page_size
        self.model = PrefixCacheModel(page_size)
        self.frees: list[tuple[int, ...]] = []
        self.sut: PrefixCacheAdapter = type(self).factory(page_size, self._receive_free)
        self.next_index = 0
        self.freed: set[int] = set()
        self.keys_seen: list[tuple[int, ...]] = [()]
        self.resets = 0
        note(f"page_size={page_size}")
        self._count("runs")

    def _count(self, what: str) -> None:
        type(self).stats[what] += 1

    def _receive_free(self, indices: tuple[int, ...]) -> None:
        self.frees.append(indices)
        self._mark_freed(indices, by="cache")

    def _mark_freed(self, indices: Sequence[int], by: str) -> None:
        for i in indices:
            assert 0 <= i < self.next_index, f"INV-7: {by} freed {i}, which was never allocated"
            assert i not in self.freed, f"INV-7: {by} freed index {i} twice"
            self.freed.add(i)

    def _allocate(self, n: int) -> tuple[int, ...]:
        out = tuple(range(self.next_index, self.next_index + n))
        self.next_index += n
        return out

    def _draw_tokens(self, data: st.DataObject) -> tuple[int, ...]:
        """A key that often shares a prefix with an earlier one: a cut of it plus a tail."""
        base = data.draw(st.sampled_from(self.keys_seen), label="base")
        cut = data.draw(st.integers(0, len(base)), label="cut")
        tail = data.draw(st.lists(TOKEN_ALPHABET, max_size=3 * self.page_size), label="tail")
        return base[:cut] + tuple(tail)

    def _ref(self, handle: Any, namespace: Namespace, prefix: tuple[int, ...]) -> NodeRef:
        return NodeRef(handle, namespace, prefix, self.model.clock, self.resets)

    def _is_stale(self, ref: NodeRef) -> bool:
        """The node was deleted since the handle was taken (its position evicted, or reset).

        A reset replaces the root too, so even a handle to the old root is stale.
        """
        if ref.resets != self.resets:
            return True
        return bool(ref.prefix) and self.model.handle_is_stale(ref.namespace, ref.prefix, ref.born)

    def _expect_rejected(self, call: Callable[[], object], what: str) -> None:
        """The call must raise a usage error and change nothing (INV-14)."""
        before, frees = self.sut.snapshot(), len(self.frees)
        try:
            call()
        except self.sut.usage_errors:
            self._count(f"rejected {what}")
        else:
            raise AssertionError(f"INV-14: {what} was accepted")
        assert self.sut.snapshot() == before, f"INV-14: rejected {what} changed the cache"
        assert len(self.frees) == frees, f"INV-14: rejected {what} freed indices"

    # ---- operations --------------------------------------------------------------------

    @rule(target=nodes, data=st.data(), namespace=NAMESPACES)
    def insert(self, data: st.DataObject, namespace: Namespace) -> NodeRef:
        """A caller with fresh indices for the whole key: it frees what the tree had."""
        tokens = self._draw_tokens(data)
        indices = self._allocate(len(tokens))
        prefix_len, handle = self.sut.insert(tokens, namespace, indices)
        expected = self.model.insert(namespace, tokens, indices)
        assert prefix_len == expected, f"INV-12: prefix_len {prefix_len}, spec says {expected}"
        aligned = page_align(len(tokens), self.page_size)
        self._mark_freed(indices[:prefix_len] + indices[aligned:], by="caller")
        self.keys_seen.append(tokens)
        self._count("insert")
        return self._ref(handle, namespace, tokens[:aligned])

    @rule(target=nodes, data=st.data(), namespace=NAMESPACES)
    def extend_request(self, data: st.DataObject, namespace: Namespace) -> NodeRef:
        """A caller that matched first: it reuses the tree's indices and adds fresh ones."""
        tokens = self._draw_tokens(data)
        matched, _ = self.sut.match(tokens, namespace)
        assert matched == self.model.match(namespace, tokens), "INV-10: match disagrees"
        fresh = self._allocate(len(tokens) - len(matched))
        prefix_len, handle = self.sut.insert(tokens, namespace, matched + fresh)
        expected = self.model.insert(namespace, tokens, matched + fresh)
        assert prefix_len == expected, f"INV-12: prefix_len {prefix_len}, spec says {expected}"
        aligned = page_align(len(tokens), self.page_size)
        duplicates = (matched + fresh)[len(matched) : prefix_len]
        self._mark_freed(duplicates + (matched + fresh)[aligned:], by="caller")
        self.keys_seen.append(tokens)
        self._count("extend_request")
        return self._ref(handle, namespace, tokens[:aligned])

    @rule(target=nodes, data=st.data(), namespace=NAMESPACES)
    def match(self, data: st.DataObject, namespace: Namespace) -> NodeRef:
        tokens = self._draw_tokens(data)
        indices, handle = self.sut.match(tokens, namespace)
        expected = self.model.match(namespace, tokens)
        assert indices == expected, f"INV-10: match gave {indices}, spec says {expected}"
        self._count("match")
        return self._ref(handle, namespace, tokens[: len(indices)])

    @rule(target=locks, ref=nodes)
    def lock(self, ref: NodeRef) -> LockRef:
        if self._is_stale(ref):
            self._expect_rejected(lambda: self.sut.lock(ref.handle), "lock of an evicted node")
            return LockRef(ref, None)
        token = self.sut.lock(ref.handle)
        if ref.prefix:
            self.model.lock(ref.namespace, ref.prefix)
        self._count("lock")
        return LockRef(ref, token)

    @rule(ref=nodes)
    def page_hashes(self, ref: NodeRef) -> None:
        """Page hashes are a pure function of namespace and root path (INV-9, INV-13)."""
        if self._is_stale(ref) or not ref.prefix:
            return
        got = self.sut.page_hashes(ref.handle)
        expected = spec_page_hashes(ref.namespace, ref.prefix, self.page_size)
        assert got == expected, f"INV-9: page hashes of {ref.prefix} differ from the spec"
        self._count("page_hashes")

    @rule(held=consumes(locks))
    def unlock(self, held: LockRef) -> None:
        ref = held.node
        if self._is_stale(ref):
            self._expect_rejected(lambda: self.sut.unlock(ref.handle, held.token), "stale unlock")
            return
        self.sut.unlock(ref.handle, held.token)
        if ref.prefix:
            self.model.unlock(ref.namespace, ref.prefix)
        self._count("unlock")

    @rule(ref=nodes)
    def unlock_without_lock(self, ref: NodeRef) -> None:
        """An unlock that no lock matches is rejected, never a silent negative count."""
        if self._is_stale(ref):
            self._expect_rejected(lambda: self.sut.unlock(ref.handle, None), "stale unlock")
            return
        if not ref.prefix or self.model.handle_count(ref.namespace, ref.prefix) > 0:
            return
        self._expect_rejected(lambda: self.sut.unlock(ref.handle, None), "unmatched unlock")

    @rule(num_tokens=st.integers(0, 40))
    def evict(self, num_tokens: int) -> None:
        before = len(self.frees)
        reported = self.sut.evict(num_tokens)
        groups = self.frees[before:]
        self.model.apply_eviction(num_tokens, groups)
        freed = sum(len(g) for g in groups)
        assert reported == freed, f"INV-11: evict reported {reported}, freed {freed}"
        self._count("evict")
        self.stats["evicted tokens"] += freed

    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        """Drop everything; rarer than the other rules so that trees grow."""
        if roll:
            return
        before = len(self.frees)
        cached = self.model.reset()
        self.sut.reset()
        freed = [i for group in self.frees[before:] for i in group]
        assert sorted(freed) == sorted(cached), "INV-7: reset must free every cached index once"
        self.resets += 1
        self._count("reset")

    # ---- bad input ---------------------------------------------------------------------

    @rule(data=st.data(), namespace=NAMESPACES, kind=st.sampled_from(sorted(BAD_CALLS)))
    def bad_call(self, data: st.DataObject, namespace: Namespace, kind: str) -> None:
        """A call the cache must reject with a usage error, changing nothing (INV-14)."""
        build: Callable[[st.DataObject, Namespace], Callable[[], object]]
        build = getattr(self, BAD_CALLS[kind])
        self._expect_rejected(build(data, namespace), kind)

    def _bad_token_insert(self, data: st.DataObject, ns: Namespace) -> Callable[[], object]:
        tokens = self._draw_tokens(data)
        at = data.draw(st.integers(0, len(tokens)), label="at")
        key = (*tokens[:at], data.draw(st.sampled_from(BAD_TOKENS), label="bad"), *tokens[at:])
        indices = tuple(range(len(key)))  # never adopted: the call must be rejected
        return lambda: self.sut.insert(key, ns, indices)

    def _bad_token_match(self, data: st.DataObject, ns: Namespace) -> Callable[[], object]:
        key = (*self._draw_tokens(data), data.draw(st.sampled_from(BAD_TOKENS), label="bad"))
        return lambda: self.sut.match(key, ns)

    def _bad_namespace_insert(self, data: st.DataObject, _: Namespace) -> Callable[[], object]:
        tokens = self._draw_tokens(data)
        bad = data.draw(st.sampled_from(BAD_NAMESPACES), label="bad")
        return lambda: self.sut.insert(tokens, bad, tuple(range(len(tokens))))

    def _bad_namespace_match(self, data: st.DataObject, _: Namespace) -> Callable[[], object]:
        tokens = self._draw_tokens(data)
        bad = data.draw(st.sampled_from(BAD_NAMESPACES), label="bad")
        return lambda: self.sut.match(tokens, bad)

    def _short_value(self, data: st.DataObject, ns: Namespace) -> Callable[[], object]:
        tokens = self._draw_tokens(data) + (0,) * self.page_size
        aligned = page_align(len(tokens), self.page_size)
        missing = data.draw(st.integers(1, aligned), label="missing")
        return lambda: self.sut.insert(tokens, ns, tuple(range(aligned - missing)))

    def _negative_evict(self, data: st.DataObject, _: Namespace) -> Callable[[], object]:
        num_tokens = data.draw(st.integers(-5, -1), label="num_tokens")
        return lambda: self.sut.evict(num_tokens)

    # ---- invariants --------------------------------------------------------------------

    def _started(self) -> bool:
        return hasattr(self, "sut")

    @precondition(_started)
    @invariant()
    def agrees_with_spec(self) -> None:
        contents = self.sut.contents()
        expected = {
            (ns, path, offset): index
            for ns, path in self.model.positions()
            for offset, index in enumerate(self.model.pages[ns][path])
        }
        assert contents == expected, "INV-10: the cached token -> index map differs from the spec"
        sizes = self.sut.sizes()
        assert sizes.total == self.model.total_size(), "INV-6: total_size differs from the spec"
        assert sizes.evictable == self.model.evictable_size(), "INV-6: evictable_size differs"
        assert sizes.protected == self.model.protected_size(), "INV-6: protected_size differs"
        assert sizes.evictable + sizes.protected == sizes.total, "INV-6: sizes do not add up"
        self._count("invariant checks")

    @precondition(_started)
    @invariant()
    def implementation_checks_itself(self) -> None:
        self.sut.check()

    @precondition(_started)
    @invariant()
    def every_index_has_one_owner(self) -> None:
        held = list(self.sut.contents().values())
        assert len(held) == len(set(held)), "INV-7: an index is cached at two positions"
        assert not set(held) & self.freed, "INV-7: a cached index was freed"
        missing = set(range(self.next_index)) - set(held) - self.freed
        assert not missing, f"INV-7: indices leaked (neither cached nor freed): {sorted(missing)}"


def machine_for(name: str, factory: AdapterFactory, **overrides: Any) -> type[RadixCacheMachine]:
    """A machine class for one implementation; distinct names keep example databases apart."""
    attrs: dict[str, Any] = {"factory": staticmethod(factory), "stats": Counter(), **overrides}
    return type(name, (RadixCacheMachine,), attrs)
