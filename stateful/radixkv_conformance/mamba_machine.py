"""The Mamba machine: MambaRadixCache and ``radixkv_spec.mamba.MambaCacheModel``, side by side.

The machine plays the serving engine: it hands out KV indices and state slots, frees its
duplicates after an insert (and its slot when ``mamba_exist``), frees the copy-on-write
slot a match gave it, and receives whatever the cache frees, in order, as events. After
every step it checks the cached pages and states against the model, the sizes, the lock
counts (INV-30), the LRU orders (INV-32), and that every KV index and every state slot has
exactly one owner (INV-7, INV-33).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol, cast

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
from radixkv_spec.mamba import Event, MambaCacheModel
from radixkv_spec.tokens import page_align

import radixkv
from radixkv.mamba_node import MambaTreeNode
from radixkv_conformance.protocol import Namespace

NAMESPACES = st.sampled_from([None, "a"])
TOKEN_ALPHABET = st.integers(0, 3)
BAD_TOKENS: Sequence[object] = (-1, 2**63, "7", 1.5, None)
BAD_NAMESPACES: Sequence[object] = (5, b"a", ("a",))
Position = tuple[Namespace, tuple[int, ...]]


class MambaSizes(NamedTuple):
    evictable: int
    protected: int
    total: int
    mamba_evictable: int
    mamba_protected: int


class Matched(NamedTuple):
    indices: tuple[int, ...]
    handle: Any
    prefix_len: int
    branching_seqlen: int | None
    cow_slot: int | None


class Inserted(NamedTuple):
    prefix_len: int
    mamba_exist: bool
    handle: Any


class MambaCacheAdapter(Protocol):
    """What the machine needs from a mamba prefix cache, in plain values."""

    page_size: int
    usage_errors: tuple[type[BaseException], ...]

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> Matched: ...

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...], slot: Any
    ) -> Inserted: ...

    def lock(self, handle: Any) -> None: ...

    def unlock(self, handle: Any) -> None: ...

    def evict(self, num_tokens: Any, mamba_slots: Any) -> tuple[int, int]:
        """Returns (full_evicted, mamba_evicted); the frees go to the event sink."""

    def reset(self) -> None: ...

    def sizes(self) -> MambaSizes: ...

    def contents(self) -> dict[Position, tuple[tuple[int, ...], int | None]]:
        """Every cached page position: its KV indices, and the slot held there if any."""

    def lru_orders(self) -> tuple[list[Position], list[Position]]:
        """The end positions of the full and the mamba LRU list, most recent first."""

    def lock_counts(self) -> list[tuple[int, int]]:
        """(full_lock_ref, mamba_lock_ref) of every live node."""

    def check(self) -> None: ...

    def snapshot(self) -> Hashable: ...


class Engine(Protocol):
    """The machine's side of the pools: where slots come from and where frees go."""

    def new_slot(self) -> int: ...

    def record(self, event: Event) -> None: ...

    def copied(self, src: int, dst: int) -> None: ...


class _EnginePools:
    """The KV allocator and the mamba pool the cache sees; both report to the engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.device = torch.device("cpu")

    def free(self, indices: torch.Tensor) -> None:
        self.engine.record(("kv", tuple(int(i) for i in indices.tolist())))

    def alloc_track_slot(self) -> int:
        return self.engine.new_slot()

    def free_track_slot(self, slot: int) -> None:
        self.engine.record(("slot", int(slot)))

    def copy_states(self, src: int, dst: int) -> None:
        self.engine.copied(int(src), int(dst))


class RadixKVMambaAdapter:
    """radixkv's MambaRadixCache under the machine."""

    usage_errors: tuple[type[BaseException], ...] = (radixkv.UsageError,)

    def __init__(self, page_size: int, engine: Engine) -> None:
        self.page_size = page_size
        self.evicted_ids: list[int] = []
        pools = _EnginePools(engine)
        self.cache = radixkv.MambaRadixCache(page_size, pools, pools, self.evicted_ids.append)

    def match(self, tokens: tuple[Any, ...], namespace: Any) -> Matched:
        r = self.cache.match_prefix(radixkv.RadixKey(list(tokens), namespace))
        indices = tuple(r.indices.tolist())
        return Matched(indices, r.last_node, r.prefix_len, r.mamba_branching_seqlen, r.cow_slot)

    def insert(
        self, tokens: tuple[Any, ...], namespace: Any, indices: tuple[int, ...], slot: Any
    ) -> Inserted:
        value = torch.tensor(indices, dtype=torch.int64)
        key = radixkv.RadixKey(list(tokens), namespace)
        r = self.cache.insert(key, value, mamba_value=slot)
        return Inserted(r.prefix_len, r.mamba_exist, r.last_node)

    def lock(self, handle: Any) -> None:
        self.cache.inc_lock_ref(handle)

    def unlock(self, handle: Any) -> None:
        self.cache.dec_lock_ref(handle)

    def evict(self, num_tokens: Any, mamba_slots: Any) -> tuple[int, int]:
        r = self.cache.evict(num_tokens, mamba_slots)
        return r.full_evicted, r.mamba_evicted

    def reset(self) -> None:
        self.cache.reset()

    def sizes(self) -> MambaSizes:
        c = self.cache
        return MambaSizes(
            c.evictable_size(),
            c.protected_size(),
            c.total_size(),
            c.mamba_evictable_size(),
            c.mamba_protected_size(),
        )

    def contents(self) -> dict[Position, tuple[tuple[int, ...], int | None]]:
        out: dict[Position, tuple[tuple[int, ...], int | None]] = {}
        p = self.page_size
        for node in self.cache.nodes():
            path = _path(node)
            assert node.value is not None
            values = tuple(node.value.tolist())
            start = len(path) - len(node)
            for end in range(start + p, len(path) + 1, p):
                slot = node.slot if end == len(path) else None
                out[(node.extra_key, path[:end])] = (values[end - start - p : end - start], slot)
        return out

    def lru_orders(self) -> tuple[list[Position], list[Position]]:
        return (
            [(n.extra_key, _path(n)) for n in self.cache.full_lru],
            [(n.extra_key, _path(n)) for n in self.cache.mamba_lru],
        )

    def lock_counts(self) -> list[tuple[int, int]]:
        return [(n.full_lock_ref, n.mamba_lock_ref) for n in self.cache.nodes()]

    def check(self) -> None:
        self.cache.check_invariants()
        live = {node.id for node in self.cache.nodes()}
        assert len(set(self.evicted_ids)) == len(self.evicted_ids), "on_node_evict fired twice"
        assert not live & set(self.evicted_ids), "on_node_evict fired for a live node"

    def snapshot(self) -> Hashable:
        nodes = tuple(
            (
                n.id,
                n.parent.id if n.parent is not None else None,
                n.extra_key,
                n.tokens,
                tuple(n.value.tolist()) if n.value is not None else None,
                n.slot,
                n.full_lock_ref,
                n.mamba_lock_ref,
                n.last_access_time,
                n.hit_count,
            )
            for n in self.cache.nodes()
        )
        full, mamba = self.lru_orders()
        return (nodes, self.sizes(), tuple(full), tuple(mamba), len(self.evicted_ids))


def _path(node: MambaTreeNode) -> tuple[int, ...]:
    parts: list[tuple[int, ...]] = []
    current = node
    while current.parent is not None:
        parts.append(cast(tuple[int, ...], current.tokens))  # the machine uses int tokens
        current = cast(MambaTreeNode, current.parent)
    return tuple(t for part in reversed(parts) for t in part)


MambaAdapterFactory = Callable[[int, Engine], MambaCacheAdapter]


@dataclass(frozen=True)
class NodeRef:
    handle: Any
    namespace: Namespace
    prefix: tuple[int, ...]
    born: int
    resets: int


@dataclass(frozen=True)
class LockRef:
    node: NodeRef


class MambaCacheMachine(RuleBasedStateMachine):
    """Drives ``factory(page_size, engine)`` and ``radixkv_spec.mamba.MambaCacheModel``."""

    factory: ClassVar[MambaAdapterFactory]
    page_sizes: ClassVar[Sequence[int]] = (1, 2, 4)
    stats: ClassVar[Counter[str]] = Counter()

    nodes = Bundle("mamba_nodes")
    locks = Bundle("mamba_locks")

    # ---- the engine ----------------------------------------------------------------------

    @initialize(page_size=st.sampled_from([1, 2, 4]))
    def start(self, page_size: int) -> None:
        self.page_size = page_size
        self.model = MambaCacheModel(page_size)
        self.events: list[Event] = []
        self.copies: list[tuple[int, int]] = []
        self.next_index = self.next_slot = 0
        self.freed: set[int] = set()
        self.freed_slots: set[int] = set()
        self.keys_seen: list[tuple[int, ...]] = [()]
        self.resets = 0
        self.sut: MambaCacheAdapter = type(self).factory(page_size, self)
        note(f"page_size={page_size}")
        self._count("runs")

    def new_slot(self) -> int:
        self.next_slot += 1
        return self.next_slot - 1

    def record(self, event: Event) -> None:
        self.events.append(event)
        kind, payload = event
        if kind == "kv":
            assert isinstance(payload, tuple)
            self._free_kv(payload, by="cache")
        else:
            assert isinstance(payload, int)
            self._free_slot(payload, by="cache")

    def copied(self, src: int, dst: int) -> None:
        # INV-33: the copy's destination is the request's, never a slot the tree holds
        assert dst not in self.model.owned_slots(), f"INV-33: copy_states wrote tree slot {dst}"
        self.copies.append((src, dst))

    def _count(self, what: str) -> None:
        type(self).stats[what] += 1

    def _free_kv(self, indices: Sequence[int], by: str) -> None:
        for i in indices:
            assert 0 <= i < self.next_index, f"INV-7: {by} freed {i}, never allocated"
            assert i not in self.freed, f"INV-7: {by} freed index {i} twice"
            self.freed.add(i)

    def _free_slot(self, slot: int, by: str) -> None:
        assert 0 <= slot < self.next_slot, f"INV-33: {by} freed slot {slot}, never allocated"
        assert slot not in self.freed_slots, f"INV-33: {by} freed slot {slot} twice"
        self.freed_slots.add(slot)

    def _allocate(self, n: int) -> tuple[int, ...]:
        self.next_index += n
        return tuple(range(self.next_index - n, self.next_index))

    def _draw_tokens(self, data: st.DataObject) -> tuple[int, ...]:
        base = data.draw(st.sampled_from(self.keys_seen), label="base")
        cut = data.draw(st.integers(0, len(base)), label="cut")
        tail = data.draw(st.lists(TOKEN_ALPHABET, max_size=3 * self.page_size), label="tail")
        return base[:cut] + tuple(tail)

    def _ref(self, handle: Any, ns: Namespace, prefix: tuple[int, ...]) -> NodeRef:
        return NodeRef(handle, ns, prefix, self.model.clock, self.resets)

    def _is_stale(self, ref: NodeRef) -> bool:
        if ref.handle is None:
            return False  # the handle of a refused call: None locks nothing, ever
        if ref.resets != self.resets:
            return True
        return bool(ref.prefix) and self.model.handle_is_stale(ref.namespace, ref.prefix, ref.born)

    def _expect_rejected(self, call: Callable[[], object], what: str) -> None:
        """The call must raise a usage error and change nothing (INV-14)."""
        before, events, slots = self.sut.snapshot(), len(self.events), self.next_slot
        try:
            call()
        except self.sut.usage_errors:
            self._count(f"rejected {what}")
        else:
            raise AssertionError(f"INV-14: {what} was accepted")
        assert self.sut.snapshot() == before, f"INV-14: rejected {what} changed the cache"
        assert len(self.events) == events, f"INV-14: rejected {what} freed something"
        assert self.next_slot == slots, f"INV-14: rejected {what} took a slot"

    # ---- requests ------------------------------------------------------------------------

    def _insert(
        self,
        tokens: tuple[int, ...],
        ns: Namespace,
        row: tuple[int, ...],
        protected: int,
        slot: int | None,
    ) -> tuple[NodeRef, int]:
        """Insert a request's row like an engine; return the handle and the new prefix_len.

        ``row[:protected]`` are the tree's own indices (from a match); the engine frees its
        duplicates ``row[protected:prefix_len]``, its unaligned tail, and its slot when the
        state existed already.
        """
        got = self.sut.insert(tokens, ns, row, slot)
        prefix_len, mamba_exist = self.model.insert(ns, tokens, row, slot)
        assert got.prefix_len == prefix_len, f"INV-12: prefix_len {got.prefix_len} != {prefix_len}"
        assert got.mamba_exist == mamba_exist, f"INV-31: mamba_exist {got.mamba_exist}"
        aligned = page_align(len(tokens), self.page_size)
        self._free_kv(row[protected:prefix_len] + row[aligned:], by="caller")
        if slot is not None and mamba_exist:
            self._free_slot(slot, by="caller")
        self.keys_seen.append(tokens)
        return self._ref(got.handle, ns, tokens[:aligned]), prefix_len

    @rule(target=nodes, data=st.data(), ns=NAMESPACES, with_slot=st.booleans())
    def insert(self, data: st.DataObject, ns: Namespace, with_slot: bool) -> NodeRef:
        """Fresh KV for the whole key, with a fresh state slot or none."""
        tokens = self._draw_tokens(data)
        if not with_slot and self.model.kv_len(ns, tokens) < page_align(
            len(tokens), self.page_size
        ):
            row = tuple(range(len(tokens)))
            self._expect_rejected(
                lambda: self.sut.insert(tokens, ns, row, None), "new tokens without a state"
            )
            return self._ref(None, ns, ())
        slot = self.new_slot() if with_slot else None
        self._count("insert" if with_slot else "insert without state")
        return self._insert(tokens, ns, self._allocate(len(tokens)), 0, slot)[0]

    def _match(self, tokens: tuple[int, ...], ns: Namespace) -> Matched:
        copies = len(self.copies)
        got = self.sut.match(tokens, ns)
        want = self.model.match(ns, tokens)
        assert got.indices == want.indices, f"INV-34: match gave {got.indices}, spec {want}"
        assert got.prefix_len == want.prefix_len, f"INV-34: prefix_len {got.prefix_len}, {want}"
        assert got.branching_seqlen == want.branching_seqlen, (
            f"INV-34: mamba_branching_seqlen {got.branching_seqlen}, spec {want}"
        )
        if want.source_slot is None:
            assert got.cow_slot is None, "INV-34: a copy-on-write slot for the initial state"
            assert len(self.copies) == copies, "INV-34: copied a state for a root match"
        else:
            expected = [(want.source_slot, got.cow_slot)]
            assert got.cow_slot is not None, "INV-34: no copy-on-write slot for a state hit"
            assert self.copies[copies:] == expected, f"INV-33: copies {self.copies[copies:]}"
        return got

    @rule(target=nodes, data=st.data(), ns=NAMESPACES)
    def match(self, data: st.DataObject, ns: Namespace) -> NodeRef:
        """A request that matches, then aborts: it frees its copy of the state."""
        tokens = self._draw_tokens(data)
        got = self._match(tokens, ns)
        if got.cow_slot is not None:
            self._free_slot(got.cow_slot, by="caller")
        self._count("match")
        return self._ref(got.handle, ns, tokens[: got.prefix_len])

    @rule(target=nodes, data=st.data(), ns=NAMESPACES, snapshot=st.booleans())
    def request(self, data: st.DataObject, ns: Namespace, snapshot: bool) -> NodeRef:
        """Match, run from the copied state, maybe cache a state at the branching point,
        then cache the whole key with the request's own slot (copy-on-write)."""
        tokens = self._draw_tokens(data)
        got = self._match(tokens, ns)
        working = got.cow_slot if got.cow_slot is not None else self.new_slot()
        row = got.indices + self._allocate(len(tokens) - got.prefix_len)
        protected = got.prefix_len
        if snapshot and got.branching_seqlen is not None:
            cut = got.branching_seqlen
            _, protected = self._insert(tokens[:cut], ns, row[:cut], protected, self.new_slot())
            row = self.model.indices_of(ns, tokens[:protected]) + row[protected:]
            self._count("request with a snapshot")
        self._count("request")
        return self._insert(tokens, ns, row, protected, working)[0]

    # ---- locks ---------------------------------------------------------------------------

    @rule(target=locks, ref=nodes)
    def lock(self, ref: NodeRef) -> LockRef:
        if self._is_stale(ref):
            self._expect_rejected(lambda: self.sut.lock(ref.handle), "lock of an evicted node")
            return LockRef(NodeRef(None, None, (), 0, -1))
        if ref.prefix and not self.model.has_state(ref.namespace, ref.prefix):
            self._expect_rejected(lambda: self.sut.lock(ref.handle), "lock of a tombstone")
            return LockRef(NodeRef(None, None, (), 0, -1))
        self.sut.lock(ref.handle)
        self.model.lock(ref.namespace, ref.prefix)
        self._count("lock")
        return LockRef(ref)

    @rule(held=consumes(locks))
    def unlock(self, held: LockRef) -> None:
        ref = held.node
        if ref.resets < 0:
            return  # the lock was refused
        if self._is_stale(ref):
            self._expect_rejected(lambda: self.sut.unlock(ref.handle), "stale unlock")
            return
        self.sut.unlock(ref.handle)
        self.model.unlock(ref.namespace, ref.prefix)
        self._count("unlock")

    @rule(ref=nodes)
    def unlock_without_lock(self, ref: NodeRef) -> None:
        if self._is_stale(ref) or not ref.prefix:
            return
        if self.model.handle_count(ref.namespace, ref.prefix) == 0:
            self._expect_rejected(lambda: self.sut.unlock(ref.handle), "unmatched unlock")

    # ---- eviction and reset --------------------------------------------------------------

    @rule(num_tokens=st.integers(0, 24), mamba_slots=st.integers(0, 4))
    def evict(self, num_tokens: int, mamba_slots: int) -> None:
        before = len(self.events)
        full, mamba = self.sut.evict(num_tokens, mamba_slots)
        events = self.events[before:]
        self.model.apply_eviction(num_tokens, mamba_slots, events)
        tokens = sum(len(p) for k, p in events if k == "kv" and isinstance(p, tuple))
        slots = sum(1 for k, _ in events if k == "slot")
        assert full == tokens, f"INV-35: full_evicted {full}, freed {tokens} tokens"
        assert mamba == slots, f"INV-35: mamba_evicted {mamba}, freed {slots} slots"
        self._count("evict")
        self.stats["evicted tokens"] += tokens
        self.stats["evicted slots"] += slots

    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        if roll:
            return
        before = len(self.events)
        indices, slots = self.model.reset()
        self.sut.reset()
        events = self.events[before:]
        kv = sorted(i for k, p in events if k == "kv" and isinstance(p, tuple) for i in p)
        freed_slots = sorted(p for k, p in events if k == "slot" and isinstance(p, int))
        assert kv == indices, "INV-7: reset must free every cached index once"
        assert freed_slots == slots, "INV-33: reset must free every state slot once"
        self.resets += 1
        self._count("reset")

    # ---- bad input -----------------------------------------------------------------------

    @rule(data=st.data(), ns=NAMESPACES)
    def bad_call(self, data: st.DataObject, ns: Namespace) -> None:
        """A call the cache must reject with a usage error, changing nothing (INV-14)."""
        tokens = self._draw_tokens(data) + (0,) * self.page_size
        short = page_align(len(tokens), self.page_size) - 1
        row = tuple(range(len(tokens)))
        bad_token = data.draw(st.sampled_from(BAD_TOKENS), label="bad token")
        bad_ns = data.draw(st.sampled_from(BAD_NAMESPACES), label="bad namespace")
        unused = 10**9  # a slot nobody holds: only the other argument is wrong
        calls: dict[str, Callable[[], object]] = {
            "insert with a bad token": lambda: self.sut.insert(
                (*tokens, bad_token), ns, (*row, 0), unused
            ),
            "match with a bad token": lambda: self.sut.match((bad_token, *tokens), ns),
            "insert with a non-str extra_key": lambda: self.sut.insert(tokens, bad_ns, row, unused),
            "match with a non-str extra_key": lambda: self.sut.match(tokens, bad_ns),
            "insert with a short value": lambda: self.sut.insert(tokens, ns, row[:short], unused),
            "evict a negative count": lambda: self.sut.evict(-1, 0),
            "evict a negative slot count": lambda: self.sut.evict(0, -1),
            "insert with a negative slot": lambda: self.sut.insert(tokens, ns, row, -1),
        }
        owned = sorted(self.model.owned_slots())
        if owned:
            slot = data.draw(st.sampled_from(owned), label="owned slot")
            calls["insert with a slot the tree owns"] = lambda: self.sut.insert(
                tokens, ns, row, slot
            )
        what = data.draw(st.sampled_from(sorted(calls)), label="bad call")
        self._expect_rejected(calls[what], what)

    # ---- invariants ----------------------------------------------------------------------

    def _started(self) -> bool:
        return hasattr(self, "sut")

    @precondition(_started)
    @invariant()
    def agrees_with_spec(self) -> None:
        self._count("invariant checks")
        assert self.sut.contents() == self.model.contents(), (
            "INV-10/31: cached pages or states differ from the spec"
        )
        m = self.model
        want = MambaSizes(
            m.evictable_size(),
            m.protected_size(),
            m.total_size(),
            m.mamba_evictable_size(),
            m.mamba_protected_size(),
        )
        assert self.sut.sizes() == want, f"INV-6/33: sizes {self.sut.sizes()}, spec {want}"
        self.model.check()

    @precondition(_started)
    @invariant()
    def locks_and_lists(self) -> None:
        for full, mamba in self.sut.lock_counts():
            assert full >= mamba >= 0, f"INV-30: full_lock_ref {full} < mamba_lock_ref {mamba}"
        full_order, mamba_order = self.sut.lru_orders()
        cached = self.model.contents()
        assert len(set(full_order)) == len(full_order), "INV-32: a node is listed twice"
        assert set(full_order) <= set(cached), "INV-32: the full list holds a dead node"
        leaves = {pos for pos in cached if not self.model.children(*pos)}
        assert leaves | set(self.model.states) <= set(full_order), "INV-32: a node is unlisted"
        assert sorted(mamba_order, key=repr) == sorted(self.model.states, key=repr), (
            "INV-32: the mamba list is not exactly the nodes holding a state"
        )
        for order, name in ((full_order, "full"), (mamba_order, "mamba")):
            keys = [self.model.key(pos) for pos in order]
            assert keys == sorted(keys, reverse=True), f"INV-32: {name} list out of LRU order"
        self.sut.check()

    @precondition(_started)
    @invariant()
    def every_index_and_slot_has_one_owner(self) -> None:
        held = self.model.cached_indices()
        assert not held & self.freed, "INV-7: a cached index was freed"
        missing = set(range(self.next_index)) - held - self.freed
        assert not missing, f"INV-7: indices leaked: {sorted(missing)}"
        owned = self.model.owned_slots()
        assert not owned & self.freed_slots, "INV-33: a tree-owned slot was freed"
        lost = set(range(self.next_slot)) - owned - self.freed_slots
        assert not lost, f"INV-33: state slots leaked: {sorted(lost)}"


def mamba_machine_for(
    name: str, factory: MambaAdapterFactory, **overrides: Any
) -> type[MambaCacheMachine]:
    """A machine class for one implementation; distinct names keep example databases apart."""
    attrs: dict[str, Any] = {"factory": staticmethod(factory), "stats": Counter(), **overrides}
    return type(name, (MambaCacheMachine,), attrs)
