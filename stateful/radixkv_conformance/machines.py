"""The prefix-cache state machine: an implementation and the spec, side by side.

Every rule does the same thing to the cache under test (through its adapter) and to the
spec's model, and compares what they say. After every step the invariants check that the
two hold the same token -> index map, that the sizes agree, that the implementation's own
``check()`` passes, and that every KV index has exactly one owner (INV-7): the machine plays
the serving engine that allocates indices, frees its duplicates after an insert and its
unaligned tail, and receives whatever the cache frees.

The machine consults a ``Semantics`` profile wherever engines may legitimately differ (who
frees duplicates, eviction granularity, lock model, victim order) and skips the rules of
capabilities an implementation lacks. Each rule is a thin Hypothesis layer over a ``do_*``
method of plain values, and every ``do_*`` call is logged as one step of a trace: the trace
of the final (shrunk) failing run is what ``radixkv_conformance.trace`` writes and replays.
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
from radixkv_spec.hashing import page_hashes as spec_page_hashes
from radixkv_spec.model import PrefixCacheModel, cached_len
from radixkv_spec.tokens import page_align

from radixkv_conformance.protocol import AdapterFactory, Namespace
from radixkv_conformance.semantics import RADIXKV, Semantics

Step = dict[str, Any]

NAMESPACE_VALUES: Sequence[Namespace] = (None, "", "a")
BAD_TOKENS: Sequence[object] = (-1, -(2**40), 2**63, "7", 1.5, None)
BAD_NAMESPACES: Sequence[object] = (5, b"a", 1.5, ("a",))
TOKEN_ALPHABET = st.integers(0, 3)  # a small alphabet makes keys share pages
BAD_CALLS = {  # what the bad_call rule tries -> (the method that builds it, capability)
    "insert with a bad token": ("_bad_token_insert", "bad_input"),
    "match with a bad token": ("_bad_token_match", "bad_input"),
    "insert with a non-str extra_key": ("_bad_namespace_insert", "namespaces"),
    "match with a non-str extra_key": ("_bad_namespace_match", "namespaces"),
    "insert with a value shorter than the key": ("_short_value", "bad_input"),
    "evict a negative count": ("_negative_evict", "bad_input"),
}
CALL_FIELDS = ("tokens", "namespace", "indices", "num_tokens")
INVARIANTS = ("agrees_with_spec", "implementation_checks_itself", "every_index_has_one_owner")


@dataclass(frozen=True)
class NodeRef:
    """A handle the cache returned, the position it ends at, and the epoch it was taken."""

    handle: Any
    namespace: Namespace
    prefix: tuple[int, ...]
    born: int  # the spec's clock when the handle was taken
    resets: int  # how many resets had happened then
    step: int  # the trace step that returned it


@dataclass(frozen=True)
class LockRef:
    node: NodeRef
    token: Any
    step: int


class RadixCacheMachine(RuleBasedStateMachine):
    """Drives ``factory(page_size, free_sink)`` and ``radixkv_spec.model.PrefixCacheModel``.

    Class attributes (set by ``machine_for``): ``factory``, ``semantics``, ``disabled``
    (check ids switched off, e.g. after they already failed once), ``stats`` (a Counter
    filled while running) and ``last_trace`` (the steps of the latest run).
    """

    factory: ClassVar[AdapterFactory]
    semantics: ClassVar[Semantics] = RADIXKV
    disabled: ClassVar[frozenset[str]] = frozenset()
    stats: ClassVar[Counter[str]] = Counter()
    last_trace: ClassVar[list[Step]] = []
    last_page_size: ClassVar[int] = 1
    last_check: ClassVar[str] = ""
    progress: ClassVar[Callable[[], None] | None] = None

    nodes = Bundle("nodes")
    locks = Bundle("locks")

    # ---- setup and bookkeeping ---------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        page_size = data.draw(st.sampled_from(self.semantics.page_sizes), label="page_size")
        note(f"page_size={page_size}")
        self.setup(page_size)

    def setup(self, page_size: int) -> None:
        """Start from an empty cache and an empty model (also used by trace replay)."""
        cls = type(self)
        if cls.progress is not None:
            cls.progress()
        self.page_size = page_size
        self.trace: list[Step] = []
        cls.last_trace, cls.last_page_size, cls.last_check = self.trace, page_size, "setup"
        self.model = PrefixCacheModel(page_size)
        self.frees: list[tuple[int, ...]] = []
        self.sut: Any = cls.factory(page_size, self._receive_free)  # type: ignore[arg-type]  # the old sink; the unified machine passes a Host
        self.next_index = 0
        self.freed: set[int] = set()
        self.keys_seen: list[tuple[int, ...]] = [()]
        self.resets = 0
        self._count("runs")

    def _count(self, what: str) -> None:
        type(self).stats[what] += 1

    def _skip(self, reason: str) -> None:
        type(self).stats[f"skipped: {reason}"] += 1

    def _log(self, op: str, check: str, **fields: Any) -> Step:
        step: Step = {"id": len(self.trace), "op": op, **fields}
        self.trace.append(step)
        type(self).last_check = check
        self._count("steps")
        return step

    def _allows(self, capability: str) -> bool:
        return self.semantics.has(capability)

    def _enabled(self, check: str) -> bool:
        return check not in self.disabled

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

    def _draw_namespace(self, data: st.DataObject) -> Namespace:
        if not self._allows("namespaces"):
            return None
        return data.draw(st.sampled_from(NAMESPACE_VALUES), label="namespace")

    def _ref(self, handle: Any, namespace: Namespace, prefix: tuple[int, ...]) -> NodeRef:
        step = len(self.trace) - 1
        return NodeRef(handle, namespace, prefix, self.model.clock, self.resets, step)

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

    def _model_state(self) -> dict[str, int]:
        m = self.model
        return {
            "total": m.total_size(),
            "evictable": m.evictable_size(),
            "protected": m.protected_size(),
        }

    # ---- operations on plain values (the trace's steps) --------------------------------

    def do_match(self, tokens: tuple[int, ...], namespace: Namespace) -> NodeRef:
        step = self._log("match", "match", tokens=list(tokens), namespace=namespace)
        indices, handle = self.sut.match(tokens, namespace)
        expected = self.model.match(namespace, tokens) if self.semantics.stores else ()
        step["expect"] = {"indices": list(expected)}
        assert indices == expected, f"INV-10: match gave {indices}, spec says {expected}"
        self._count("match")
        return self._ref(handle, namespace, tokens[: len(indices)])

    def do_insert(
        self, tokens: tuple[int, ...], namespace: Namespace, indices: tuple[int, ...]
    ) -> NodeRef:
        """Insert with the caller's ``indices``; the caller frees what the cache does not adopt.

        Indices the caller passes for an already cached prefix that differ from the cached
        ones are its duplicates: freed by the caller, or by the cache when the profile says
        so. Indices past the aligned key are the caller's unaligned tail.
        """
        step = self._log(
            "insert", "insert", tokens=list(tokens), namespace=namespace, indices=list(indices)
        )
        self.next_index = max(self.next_index, max(indices, default=-1) + 1)
        aligned = page_align(len(tokens), self.page_size)
        sem = self.semantics
        key = tokens[:aligned]
        held = (
            self.model.indices_of(
                namespace, key[: cached_len(self.model.table(namespace), key, self.page_size)]
            )
            if sem.stores
            else ()
        )
        before = len(self.frees)
        prefix_len, handle = self.sut.insert(tokens, namespace, indices)
        expected = self.model.insert(namespace, tokens, indices) if sem.stores else 0
        step["expect"] = {"prefix_len": expected}
        if sem.duplicates != "kept" or prefix_len is not None:
            assert prefix_len == expected, f"INV-12: prefix_len {prefix_len}, spec says {expected}"
        kept = expected if sem.stores else 0
        duplicates = tuple(i for i, h in zip(indices[:kept], held, strict=True) if i != h)
        by_cache = [i for group in self.frees[before:] for i in group]
        if sem.duplicates == "cache":
            assert sorted(by_cache) == sorted(duplicates), "INV-7: the cache must free duplicates"
        else:
            assert not by_cache, f"INV-7: insert freed {by_cache}; the caller owns duplicates"
            self._mark_freed(duplicates, by="caller")
        adopted_end = aligned if sem.stores else 0
        self._mark_freed(indices[adopted_end:] if sem.stores else indices, by="caller")
        self.keys_seen.append(tokens)
        self._count("insert")
        return self._ref(handle, namespace, tokens[:adopted_end])

    def do_lock(self, ref: NodeRef) -> LockRef:
        step = self._log("lock", "lock", node=ref.step)
        if self._is_stale(ref):
            step["expect"] = {"rejected": True}
            if not self._allows("stale_handles"):
                self._skip(self.semantics.skip_reason("stale_handles"))
                return LockRef(ref, None, step["id"])
            if not self._enabled("lock of an evicted node"):
                return LockRef(ref, None, step["id"])
            type(self).last_check = "lock of an evicted node"
            self._expect_rejected(lambda: self.sut.lock(ref.handle), "lock of an evicted node")
            return LockRef(ref, None, step["id"])
        token = self.sut.lock(ref.handle)
        if ref.prefix:
            self.model.lock(ref.namespace, ref.prefix)
        self._count("lock")
        return LockRef(ref, token, step["id"])

    def do_unlock(self, held: LockRef) -> None:
        ref = held.node
        step = self._log("unlock", "unlock", node=ref.step, lock=held.step)
        if self._is_stale(ref):
            step["expect"] = {"rejected": True}
            if not self._allows("stale_handles"):
                self._skip(self.semantics.skip_reason("stale_handles"))
                return
            if not self._enabled("stale unlock"):
                return
            type(self).last_check = "stale unlock"
            self._expect_rejected(lambda: self.sut.unlock(ref.handle, held.token), "stale unlock")
            return
        self.sut.unlock(ref.handle, held.token)
        if ref.prefix:
            self.model.unlock(ref.namespace, ref.prefix)
            if self.semantics.recency_on_unlock:
                self.model.match(ref.namespace, ref.prefix)  # the model's way to touch a path
        self._count("unlock")

    def do_unlock_without_lock(self, ref: NodeRef) -> None:
        """An unlock that no lock matches is rejected, never a silent negative count."""
        stale = self._is_stale(ref)
        if not stale and (not ref.prefix or self.model.handle_count(ref.namespace, ref.prefix)):
            return  # not a bad call here: a root handle, or a lock is held at the node
        what = "stale unlock" if stale else "unmatched unlock"
        if stale and not self._allows("stale_handles"):
            self._skip(self.semantics.skip_reason("stale_handles"))
            return
        if not self._enabled(what):
            return
        step = self._log("unlock", what, node=ref.step, lock=None)
        step["expect"] = {"rejected": True}
        self._expect_rejected(lambda: self.sut.unlock(ref.handle, None), what)

    def do_page_hashes(self, ref: NodeRef) -> None:
        """Page hashes are a pure function of namespace and root path (INV-9, INV-13)."""
        if self._is_stale(ref) or not ref.prefix:
            return
        step = self._log("page_hashes", "page_hashes", node=ref.step)
        expected = spec_page_hashes(ref.namespace, ref.prefix, self.page_size)
        step["expect"] = {"hashes": expected}
        got = self.sut.page_hashes(ref.handle)
        assert got == expected, f"INV-9: page hashes of {ref.prefix} differ from the spec"
        self._count("page_hashes")

    def do_evict(self, num_tokens: int) -> None:
        step = self._log("evict", "evict", num_tokens=num_tokens)
        before = len(self.frees)
        reported = self.sut.evict(num_tokens)
        groups = self.frees[before:]
        step["observed"] = {"freed": [list(g) for g in groups]}
        self._apply_eviction(num_tokens, groups)
        freed = sum(len(g) for g in groups)
        assert reported == freed, f"INV-11: evict reported {reported}, freed {freed}"
        if self.semantics.eviction == "tail":
            p = self.page_size
            most = -(-num_tokens // p) * p
            assert freed <= most, f"INV-11: tail eviction freed {freed} for a target of {most}"
        self._count("evict")
        self.stats["evicted tokens"] += freed

    def _apply_eviction(self, num_tokens: int, groups: list[tuple[int, ...]]) -> None:
        if self.semantics.victim_order == "lru":
            self.model.apply_eviction(num_tokens, groups)
            return
        # Any evictable leaf may go: the model checks victims against equal recencies.
        saved = dict(self.model.recency)
        self.model.recency = dict.fromkeys(saved, 0)
        try:
            self.model.apply_eviction(num_tokens, groups)
        finally:
            self.model.recency = {pos: saved[pos] for pos in self.model.recency}

    def do_reset(self) -> None:
        step = self._log("reset", "reset")
        before = len(self.frees)
        cached = self.model.reset()
        step["expect"] = {"freed": sorted(cached)}
        self.sut.reset()
        freed = [i for group in self.frees[before:] for i in group]
        if self.semantics.reset_frees:
            assert sorted(freed) == sorted(cached), "INV-7: reset must free every cached index"
        else:
            assert not freed, "INV-7: this profile's reset frees nothing"
            self._mark_freed(cached, by="caller")
        self.resets += 1
        self._count("reset")

    def do_bad_call(self, kind: str, call: Step) -> None:
        """A call the cache must reject with a usage error, changing nothing (INV-14)."""
        op = call["op"]
        step = self._log(
            op, f"bad: {kind}", bad=kind, **{k: v for k, v in call.items() if k in CALL_FIELDS}
        )
        step["expect"] = {"rejected": True}
        if op == "insert":
            key, ns, indices = tuple(call["tokens"]), call["namespace"], tuple(call["indices"])
            self._expect_rejected(lambda: self.sut.insert(key, ns, indices), kind)
        elif op == "match":
            key, ns = tuple(call["tokens"]), call["namespace"]
            self._expect_rejected(lambda: self.sut.match(key, ns), kind)
        else:
            self._expect_rejected(lambda: self.sut.evict(call["num_tokens"]), kind)

    # ---- rules: draw plain values, then do ---------------------------------------------

    @rule(target=nodes, data=st.data())
    def insert(self, data: st.DataObject) -> NodeRef:
        """A caller with fresh indices for the whole key: it frees what the tree had."""
        namespace = self._draw_namespace(data)
        tokens = self._draw_tokens(data)
        return self.do_insert(tokens, namespace, self._allocate(len(tokens)))

    @rule(target=nodes, data=st.data())
    def extend_request(self, data: st.DataObject) -> NodeRef:
        """A caller that matched first: it reuses the tree's indices and adds fresh ones."""
        namespace = self._draw_namespace(data)
        tokens = self._draw_tokens(data)
        self.do_match(tokens, namespace)
        matched = tuple(self.trace[-1]["expect"]["indices"])  # do_match checked the cache's
        fresh = self._allocate(len(tokens) - len(matched))
        self._count("extend_request")
        return self.do_insert(tokens, namespace, matched + fresh)

    @precondition(lambda self: self.semantics.match_may_split)
    @rule(target=nodes, data=st.data())
    def match(self, data: st.DataObject) -> NodeRef:
        """A match whose handle ends exactly at the match: usable for locking."""
        return self.do_match(self._draw_tokens(data), self._draw_namespace(data))

    @precondition(lambda self: not self.semantics.match_may_split)
    @rule(data=st.data())
    def match_only(self, data: st.DataObject) -> None:
        """A match whose handle may end below the match: never locked."""
        self.do_match(self._draw_tokens(data), self._draw_namespace(data))

    @rule(target=locks, ref=nodes)
    def lock(self, ref: NodeRef) -> LockRef:
        return self.do_lock(ref)

    @precondition(lambda self: self._allows("hashing"))
    @rule(ref=nodes)
    def page_hashes(self, ref: NodeRef) -> None:
        self.do_page_hashes(ref)

    @rule(held=consumes(locks))
    def unlock(self, held: LockRef) -> None:
        self.do_unlock(held)

    @precondition(lambda self: self._allows("unlock_checks"))
    @rule(ref=nodes)
    def unlock_without_lock(self, ref: NodeRef) -> None:
        self.do_unlock_without_lock(ref)

    @rule(num_tokens=st.integers(0, 40))
    def evict(self, num_tokens: int) -> None:
        self.do_evict(num_tokens)

    @precondition(lambda self: self._allows("reset"))
    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        """Drop everything; rarer than the other rules so that trees grow."""
        if not roll:
            self.do_reset()

    @precondition(lambda self: self._allows("bad_input"))
    @rule(data=st.data(), kind=st.sampled_from(sorted(BAD_CALLS)))
    def bad_call(self, data: st.DataObject, kind: str) -> None:
        method, capability = BAD_CALLS[kind]
        if not self._allows(capability):
            self._skip(self.semantics.skip_reason(capability))
            return
        if not self._enabled(f"bad: {kind}"):
            return
        build: Callable[[st.DataObject, Namespace], Step] = getattr(self, method)
        self.do_bad_call(kind, build(data, self._draw_namespace(data)))

    # ---- bad input builders: each returns the call as a trace step ----------------------

    def _bad_token_insert(self, data: st.DataObject, ns: Namespace) -> Step:
        tokens = self._draw_tokens(data)
        at = data.draw(st.integers(0, len(tokens)), label="at")
        key = [*tokens[:at], data.draw(st.sampled_from(BAD_TOKENS), label="bad"), *tokens[at:]]
        indices = list(range(len(key)))  # never adopted: the call must be rejected
        return {"op": "insert", "tokens": key, "namespace": ns, "indices": indices}

    def _bad_token_match(self, data: st.DataObject, ns: Namespace) -> Step:
        key = [*self._draw_tokens(data), data.draw(st.sampled_from(BAD_TOKENS), label="bad")]
        return {"op": "match", "tokens": key, "namespace": ns}

    def _bad_namespace_insert(self, data: st.DataObject, _: Namespace) -> Step:
        tokens = list(self._draw_tokens(data))
        bad = data.draw(st.sampled_from(BAD_NAMESPACES), label="bad")
        return {
            "op": "insert",
            "tokens": tokens,
            "namespace": bad,
            "indices": list(range(len(tokens))),
        }

    def _bad_namespace_match(self, data: st.DataObject, _: Namespace) -> Step:
        tokens = list(self._draw_tokens(data))
        bad = data.draw(st.sampled_from(BAD_NAMESPACES), label="bad")
        return {"op": "match", "tokens": tokens, "namespace": bad}

    def _short_value(self, data: st.DataObject, ns: Namespace) -> Step:
        tokens = self._draw_tokens(data) + (0,) * self.page_size
        aligned = page_align(len(tokens), self.page_size)
        missing = data.draw(st.integers(1, aligned), label="missing")
        indices = list(range(aligned - missing))
        return {"op": "insert", "tokens": list(tokens), "namespace": ns, "indices": indices}

    def _negative_evict(self, data: st.DataObject, _: Namespace) -> Step:
        return {"op": "evict", "num_tokens": data.draw(st.integers(-5, -1), label="num_tokens")}

    # ---- invariants --------------------------------------------------------------------

    def _started(self) -> bool:
        return hasattr(self, "sut")

    @precondition(_started)
    @invariant()
    def agrees_with_spec(self) -> None:
        type(self).last_check = "invariant: agrees with the spec"
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
        type(self).last_check = "invariant: the implementation's own check"
        self.sut.check()

    @precondition(_started)
    @invariant()
    def every_index_has_one_owner(self) -> None:
        type(self).last_check = "invariant: every index has one owner"
        held = list(self.sut.contents().values())
        assert len(held) == len(set(held)), "INV-7: an index is cached at two positions"
        assert not set(held) & self.freed, "INV-7: a cached index was freed"
        missing = set(range(self.next_index)) - set(held) - self.freed
        assert not missing, f"INV-7: indices leaked (neither cached nor freed): {sorted(missing)}"


def machine_for(
    name: str,
    factory: AdapterFactory,
    semantics: Semantics = RADIXKV,
    disabled: frozenset[str] = frozenset(),
    **overrides: Any,
) -> type[RadixCacheMachine]:
    """A machine class for one implementation; distinct names keep example databases apart."""
    attrs: dict[str, Any] = {
        "factory": staticmethod(factory),
        "semantics": semantics,
        "disabled": disabled,
        "stats": Counter(),
        "last_trace": [],
        **overrides,
    }
    return type(name, (RadixCacheMachine,), attrs)
