"""The situations are computed from the spec model alone: each predicate is true on the
transition it names and false on its near misses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from radixkv_spec.cross import DECISIVE, Since
from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.situations import (
    BY_NAME,
    SITUATIONS,
    Transition,
    View,
    declared,
    reached,
    unknown,
    view_of,
)
from radixkv_spec.tokens import Position


def _step(model: PrefixCacheModel, op: str, apply: object, **fields: object) -> list[str]:
    before = view_of(model)
    assert callable(apply)
    apply()
    t = Transition(op=op, before=before, after=view_of(model), page_size=model.page_size, **fields)  # type: ignore[arg-type]
    return reached(t)


def test_an_eviction_short_of_its_target_that_empties_a_locked_parent() -> None:
    m = PrefixCacheModel(1)
    m.insert(None, (1, 2), (10, 11))
    m.lock(None, (1,))
    got = _step(m, "evict", lambda: m.evict(5), amount=5)
    assert "evict-empties-a-locked-parent" in got
    assert "evict-every-unlocked-page" in got
    assert "evict-empties-a-parent" not in got


def test_an_eviction_that_meets_its_target_is_not_past_the_locked_parent() -> None:
    m = PrefixCacheModel(1)
    m.insert(None, (1, 2, 3), (10, 11, 12))
    m.lock(None, (1,))
    got = _step(m, "evict", lambda: m.evict(1), amount=1)
    assert "evict-empties-a-locked-parent" not in got
    assert "evict-empties-a-parent" in got  # (1, 2) is left childless, and unlocked


def test_a_match_inside_a_run_and_a_split_of_a_locked_run() -> None:
    m = PrefixCacheModel(1)
    m.insert(None, (1, 2, 3), (10, 11, 12))
    assert "match-inside-a-node" in _step(m, "match", lambda: m.match(None, (1, 2)), tokens=(1, 2))
    assert "split-of-a-locked-node" not in _step(
        m, "match", lambda: m.match(None, (1, 2)), tokens=(1, 2)
    )
    m.lock(None, (1, 2, 3))
    assert "split-of-a-locked-node" in _step(
        m, "match", lambda: m.match(None, (1, 9)), tokens=(1, 9)
    )
    # a match that ends at a leaf is inside nothing
    assert "match-inside-a-node" not in _step(
        m, "match", lambda: m.match(None, (1, 2, 3)), tokens=(1, 2, 3)
    )


def test_inserts_that_extend_a_leaf_or_are_cached_whole() -> None:
    m = PrefixCacheModel(2)
    m.insert("a", (1, 2), (10, 11))
    got = _step(
        m,
        "insert",
        lambda: m.insert("a", (1, 2, 3, 4), (10, 11, 12, 13)),
        namespace="a",
        tokens=(1, 2, 3, 4),
    )
    assert got == ["insert-extends-a-leaf"]
    got = _step(
        m,
        "insert",
        lambda: m.insert("a", (1, 2, 3, 4, 5), (10, 11, 12, 13, 14)),
        namespace="a",
        tokens=(1, 2, 3, 4, 5),
    )
    assert got == ["insert-fully-cached"]  # the unaligned tail is not cached
    got = _step(m, "insert", lambda: m.insert(None, (1, 2), (20, 21)), tokens=(1, 2))
    assert got == []  # another namespace: nothing there to extend


def test_locks_overlapping_interior_and_the_last_unlock() -> None:
    m = PrefixCacheModel(1)
    m.insert(None, (1, 2), (10, 11))
    assert _step(m, "lock", lambda: m.lock(None, (1,)), handle=(None, (1,))) == ["interior-lock"]
    got = _step(m, "lock", lambda: m.lock(None, (1, 2)), handle=(None, (1, 2)))
    assert got == ["overlapping-holds"]
    assert _step(m, "unlock", lambda: m.unlock(None, (1, 2)), handle=(None, (1, 2))) == [
        "last-unlock"
    ]
    assert _step(m, "unlock", lambda: m.unlock(None, (1,)), handle=(None, (1,))) == ["last-unlock"]


def test_evictions_across_namespaces_and_a_reset_while_held() -> None:
    m = PrefixCacheModel(1)
    m.insert(None, (1,), (10,))
    m.insert("a", (1,), (11,))
    assert "evict-across-namespaces" in _step(m, "evict", lambda: m.evict(2), amount=2)
    m.insert(None, (1,), (12,))
    m.lock(None, (1,))
    assert _step(m, "reset", m.reset) == ["reset-while-held"]


def test_what_a_cache_declares() -> None:
    core = {s.name for s in declared(())}
    assert "evict-empties-a-locked-parent" in core
    assert "reset-while-held" not in core  # a cache without reset cannot reach it
    assert "reset-while-held" in {s.name for s in declared({"reset"})}
    assert declared({"reset"}, stores=False) == []  # a cache that stores nothing
    assert "insert-evicts-for-room" in {s.name for s in declared((), allocation="cache")}
    assert unknown(["last-unlock", "nonsense"]) == ["nonsense"]
    assert all(name == s.name for name, s in BY_NAME.items())


def test_an_allocation_that_evicts_and_one_refused_for_room() -> None:
    """``insert-evicts-for-room`` is an insert that removed pages; ``alloc-refused`` an
    insert the spec refused (no room) while part of its key was cached."""
    m = PrefixCacheModel(1)
    m.insert(None, (1, 2), (10, 11))

    def evict_then_insert() -> None:  # the cache freed [1, 2]'s last page to make room
        m.apply_eviction(1, [("free", (11,))])
        m.insert(None, (3,), (11,))

    evicting = _step(m, "insert", evict_then_insert, tokens=(3,))
    assert "insert-evicts-for-room" in evicting and "alloc-refused" not in evicting
    plain = _step(m, "insert", lambda: m.insert(None, (4,), (12,)), tokens=(4,))
    assert "insert-evicts-for-room" not in plain  # nothing removed
    evict = _step(m, "evict", lambda: m.evict(1), amount=1)  # [1], the least recent, goes
    assert "insert-evicts-for-room" not in evict  # an eviction, not an insert
    refused = _step(m, "insert", lambda: None, tokens=(3, 5), rejected=True)
    assert refused == ["alloc-refused"]  # [3] is cached: the allocation held it
    assert "alloc-refused" not in _step(m, "insert", lambda: None, tokens=(1, 5), rejected=True)
    assert "alloc-refused" not in _step(m, "insert", lambda: None, tokens=(3, 5))  # accepted
    assert "alloc-refused" not in _step(m, "match", lambda: None, tokens=(3, 5), rejected=True)


def test_allocation_situations_are_declared_for_a_cache_that_allocates() -> None:
    pool = {s.name for s in declared({"capacity"}, allocation="cache")}
    assert {"insert-evicts-for-room", "alloc-refused"} <= pool
    # a pool without a declared capacity is never refused: the situation stays unreached
    # and the run is incomplete (exit 3) unless the user accepts it (--uncovered-ok)
    unbounded = {s.name for s in declared((), allocation="cache")}
    assert {"insert-evicts-for-room", "alloc-refused"} <= unbounded
    caller = {s.name for s in declared({"capacity"})}  # the caller allocates
    assert not {"insert-evicts-for-room", "alloc-refused"} & caller


OPS = ("match", "insert", "evict", "lock", "unlock", "reset", "page_hashes", "free_slot")
_position: st.SearchStrategy[Position] = st.tuples(
    st.sampled_from((None, "a")), st.lists(st.integers(0, 1), min_size=1, max_size=3).map(tuple)
)
_positions = st.sets(_position, max_size=6)


@st.composite
def _views(draw: st.DrawFn) -> View:
    pages = frozenset(draw(_positions))
    held: dict[Position, int] = {q: 1 for q in draw(_positions)}
    on_paths = {(ns, path[:n]) for ns, path in held for n in range(len(path) + 1)}
    picked = st.sets(st.sampled_from(sorted(pages, key=repr))) if pages else st.just(set())
    return View(pages, held, pages & on_paths, frozenset(draw(picked)), frozenset(draw(picked)))


@st.composite
def _transitions(draw: st.DrawFn) -> Transition:
    return Transition(
        op=draw(st.sampled_from(OPS)),
        before=draw(_views()),
        after=draw(_views()),
        page_size=1,
        namespace=draw(st.sampled_from((None, "a"))),
        tokens=tuple(draw(st.lists(st.integers(0, 1), max_size=4))),
        rejected=draw(st.booleans()),
        handle=draw(st.none() | _position),
        handle_evicted=draw(st.booleans()),
        splits=frozenset(draw(_positions)),
        amount=draw(st.integers(0, 4)),
        found=draw(st.none() | st.integers(0, 4)),
    )


@settings(max_examples=300, deadline=None)
@given(_transitions(), st.dictionaries(_position, st.integers(0, 9)))
def test_only_the_operations_a_situation_names_reach_it(
    t: Transition, recency: dict[Position, int]
) -> None:
    """A step is asked only about the situations its operation can reach (``Situation.ops``,
    ``Decisive.ops``): no predicate is true for another operation."""
    for s in SITUATIONS:
        assert t.op in s.ops or not s.reached(t), s.name
    now = {q: recency.get(q, 0) for q in t.before.pages}
    since = Since(recency=recency, locked=t.after.locked, inserted=t.after.pages)
    for d in DECISIVE:
        hit = d.reached(t, since, now) or (d.near is not None and d.near(t, since, now))
        assert t.op in d.ops or not hit, d.name
