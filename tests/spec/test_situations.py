"""The situations are computed from the spec model alone: each predicate is true on the
transition it names and false on its near misses."""

from __future__ import annotations

from radixkv_spec.model import PrefixCacheModel
from radixkv_spec.situations import BY_NAME, Transition, declared, reached, unknown, view_of


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
