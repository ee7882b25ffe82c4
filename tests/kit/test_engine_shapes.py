"""Engine shapes are profile policies, not adapter hacks (docs/decisions.md §4, 2026-11-26).

``adapters.planted`` is a small cache written without radixkv; its ``vllm`` and ``max``
shapes have habits radixkv does not (no refresh on lookup, reset refused while held, its own
page hashes, flat eviction lists). Each passes under the profile that names its habits and
fails under radixkv's, for those habits only.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from radixkv_conformance import AdapterError, run_conformance
from radixkv_conformance.adapters import planted
from radixkv_conformance.adapters.radixkv import mamba, sliding_window
from radixkv_conformance.cli import main
from radixkv_conformance.profile import RADIXKV, RADIXKV_MAMBA, RADIXKV_SWA
from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import replay
from radixkv_spec.invariants import SpecUsageError, SpecViolation
from radixkv_spec.outcomes import FreeEvent
from radixkv_spec.policies import LRU_LEAVES, LRU_SPLIT_REFRESHES_BOTH, VictimOrder
from radixkv_spec.swa import DeadInsert, SlidingWindowModel

from tests.helpers import fixed_search

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

SEARCH = fixed_search(150, 25)
VLLM, MAX = planted.PROFILES["vllm_shaped"], planted.PROFILES["max_shaped"]


def _trace(*steps: dict[str, Any], page_size: int = 1) -> dict[str, Any]:
    return {
        "format": "radixkv-trace/1",
        "semantics": "radixkv",
        "mode": "plain",
        "page_size": page_size,
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }


def _insert(tokens: list[int], at: int, namespace: str | None = None) -> dict[str, Any]:
    indices = list(range(at, at + len(tokens)))
    return {"op": "insert", "tokens": tokens, "namespace": namespace, "indices": indices}


@pytest.mark.parametrize(
    ("factory", "profile", "under_radixkv"),
    [
        (planted.vllm_shaped, VLLM, {"INV-11:evict-victim-order", "INV-9:page-hashes-other"}),
        (planted.max_shaped, MAX, {"INV-11:evict-not-one-path"}),
    ],
)
def test_a_shape_passes_under_its_profile_and_only_there(
    factory: Any, profile: Any, under_radixkv: set[str]
) -> None:
    own = run_conformance(factory, profile=profile, settings=SEARCH, name=profile.name)
    own.raise_for_failures()
    assert own.stats["evicted tokens"] > 0
    if profile.allocation == "cache":
        assert own.stats["tokens evicted to make room"] > 0
    # Under radixkv's profile a vLLM-shaped cache breaks twenty rules (it owns allocation):
    # the draw is the same on every machine, so its first twelve findings are the same ones,
    # and minimizing the other eight took 50 s more.
    other = run_conformance(
        factory, profile=RADIXKV, settings=SEARCH, name=f"{profile.name}-rk", max_failures=12
    )
    assert under_radixkv <= {failure.finding for failure in other.failures}


def test_a_cache_that_owns_allocation_evicts_to_make_room_and_is_checked_for_it() -> None:
    """vLLM picks its own blocks and evicts only by allocating: an insert into a full pool
    frees the least recent page, checked as an eviction victim with the key's prefix held
    (that such evictions happen and pass is shown by the search of the vLLM shape above)."""
    locked = functools.partial(planted.vllm_shaped, bugs="locked")
    found = run_conformance(locked, profile=VLLM, settings=SEARCH, name="owned_locked")
    ids = {failure.finding for failure in found.failures}
    assert "INV-11:insert-eviction-to-make-room-locked-victim" in ids, ids


RESET_WHILE_HELD = _trace(
    _insert([1, 2], at=0),
    {"op": "lock", "node": 0},
    {"op": "reset"},
    {"op": "unlock", "node": 0, "lock": 1},
    {"op": "reset"},
)


def test_a_reset_while_held_is_refused_under_that_policy() -> None:
    assert replay(RESET_WHILE_HELD, planted.vllm_shaped, VLLM).passed
    refusing = RADIXKV.but(name="refusing", reset_while_held="refused")
    accepts = replay(RESET_WHILE_HELD, planted.factory, refusing)  # resets while held
    assert accepts.finding == "INV-14:reset-while-held", accepts
    refuses = replay(RESET_WHILE_HELD, planted.vllm_shaped, RADIXKV)
    assert refuses.finding == "ValueError:reset@planted.reset", refuses


FLAT_EVICTION = _trace(
    _insert([1, 2], at=0),
    _insert([1, 3], at=2),
    {"op": "evict", "num_tokens": 3},
)


def test_a_flat_eviction_list_is_regrouped_by_page() -> None:
    """Three pages freed in one list: the kit orders them leaf by leaf, least recent first."""
    assert replay(FLAT_EVICTION, planted.max_shaped, MAX).passed
    per_node = replay(FLAT_EVICTION, planted.max_shaped, RADIXKV)
    assert per_node.finding == "INV-11:evict-not-one-path", per_node
    locked = _trace(
        *FLAT_EVICTION["steps"][:2], {"op": "lock", "node": 1}, FLAT_EVICTION["steps"][2]
    )
    bug = functools.partial(planted.max_shaped, bugs="locked")
    assert replay(locked, bug, MAX).finding == "INV-11:evict-locked-victim"


class _HashesIgnoreNamespaces(planted.PageMapAdapter):
    def page_hashes(self, handle: planted.Page) -> list[str]:
        return self.cache.page_hashes((None, handle[1]))


def test_opaque_page_hashes_are_checked_for_consistency() -> None:
    """Own hashes need not be the spec's, but two pages never share one: equal paths in two
    namespaces sharing a hash is the namespace-blind hash bug, found as INV-9."""
    pages_in_two_namespaces = _trace(
        _insert([1], at=0, namespace=None),
        _insert([1], at=1, namespace="a"),
        {"op": "page_hashes", "node": 0},
        {"op": "page_hashes", "node": 1},
    )
    assert replay(pages_in_two_namespaces, planted.vllm_shaped, VLLM).passed
    blind = functools.partial(
        _HashesIgnoreNamespaces, bugs=frozenset(), shape=planted.SHAPES["vllm"]
    )
    result = replay(pages_in_two_namespaces, blind, VLLM)
    assert result.finding == "INV-9:page-hashes-opaque-shared", result


class _RefusesShortKeys(planted.PageMapAdapter):
    """An engine that refuses keys shorter than a page (MAX before 2025-02-20; LightLLM's
    ``match_prefix`` asserts a non-empty key)."""

    def insert(self, tokens: tuple[int, ...], namespace: Any, indices: Any) -> Any:
        if len(tokens) < self.page_size:
            raise RuntimeError("empty keys are not supported")
        return super().insert(tokens, namespace, indices)

    def match(self, tokens: tuple[int, ...], namespace: Any) -> Any:
        if len(tokens) < self.page_size:
            raise RuntimeError("empty keys are not supported")
        return super().match(tokens, namespace)


def test_a_profile_that_draws_no_empty_keys() -> None:
    def factory(page_size: int, host: Any) -> _RefusesShortKeys:
        return _RefusesShortKeys(page_size, host, frozenset(), planted.SHAPES[""])

    crashes = run_conformance(factory, profile=RADIXKV, settings=SEARCH, name="short_crash")
    assert {f.finding for f in crashes.failures} == {
        "RuntimeError:insert@test_engine_shapes.insert",
        "RuntimeError:match@test_engine_shapes.match",
    }
    no_empty = RADIXKV.but(name="no-empty-keys", empty_keys=False)
    run_conformance(
        factory, profile=no_empty, settings=SEARCH, name="short_ok"
    ).raise_for_failures()


@pytest.mark.parametrize(
    ("factory", "profile"), [(sliding_window, RADIXKV_SWA), (mamba, RADIXKV_MAMBA)]
)
def test_swa_and_mamba_models_refuse_a_profile_without_lookup_refresh(
    factory: Any, profile: Any
) -> None:
    with pytest.raises(AdapterError, match="refreshes recency on every match"):
        machine_for("x", factory, profile.but(refresh_on=frozenset({"insert"})))


def test_options_reach_the_factory_and_modules_load_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_cache_adapter.py").write_text(
        "from radixkv_conformance.adapters.planted import PROFILE, factory\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        "sys.path", [p for p in __import__("sys").path if p not in ("", os.getcwd())]
    )
    target = "my_cache_adapter:factory"
    quick = ["--hypothesis-profile", "ci", "--max-failures", "1"]  # derandomized: never flaky
    assert main(["check", target, *quick]) == 0
    assert main(["check", target, "--option", "bugs=locked", *quick]) == 1
    assert "INV-11:evict-locked-victim" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["check", target, "--option", "bugs"])  # not KEY=VALUE: a usage error


@pytest.mark.parametrize("policy", ["dropped", "tombstoned"])
def test_an_swa_insert_wholly_past_the_window_is_dropped_or_tombstoned(policy: DeadInsert) -> None:
    """Profile ``swa_dead_insert``: new pages that all lie before ``swa_evicted_seqlen``
    are dropped (their indices freed) or cached as tombstones (sglang); a tombstone leaf an
    insert made is no eviction's fault, one an eviction leaves still is (INV-20)."""
    model = SlidingWindowModel(1, 1, dead_insert=policy)
    inserted = model.insert(None, (0, 0), (0, 1), swa_evicted_seqlen=2)
    assert inserted.prefix_len == 0
    cached = {None: {(0,): (0,), (0, 0): (1,)}}
    if policy == "dropped":
        assert (inserted.dropped, inserted.end, model.pages, model.tombstones) == (
            (0, 1),
            0,
            {},
            set(),
        )
        return
    assert (inserted.dropped, inserted.end, model.pages, model.tombstones) == (
        (),
        2,
        cached,
        {(None, (0,)), (None, (0, 0))},
    )
    assert _violations(model, 0, []) == []  # the insert's tombstone leaf is not an eviction's
    model.insert(None, (1, 1), (2, 3))  # live: (1,) then (1, 1)
    assert _violations(model, 2, [("free_swa", (2,)), ("free", (3,))]) == ["INV-20"]


def _violations(
    model: SlidingWindowModel, swa_num_tokens: int, events: list[FreeEvent]
) -> list[str]:
    """The invariants an ``evict(0, swa_num_tokens)`` that freed ``events`` breaks, each
    acknowledged so the model goes on."""
    broken: list[str] = []

    def note(violation: SpecViolation) -> bool:
        broken.append(violation.inv_id)
        return True

    model.apply_eviction(0, events, waive=note, swa_num_tokens=swa_num_tokens, swa_locked=set())
    return broken


@pytest.mark.parametrize("accepted", [False, True])
def test_a_lock_of_a_tombstone_is_refused_or_holds_the_full_kv(accepted: bool) -> None:
    """Profile ``swa_tombstone_locks``: radixkv refuses a lock that ends at a tombstone;
    sglang takes it, and it then holds the full KV of its path (and no SWA window)."""
    model = SlidingWindowModel(1, 1, tombstone_locks=accepted)
    model.insert(None, (0, 0), (0, 1), swa_evicted_seqlen=1)  # (0,) a tombstone, (0, 0) live
    assert model.tombstones == {(None, (0,))}
    if not accepted:
        with pytest.raises(SpecUsageError):
            model.lock(None, (0,))
        return
    model.lock(None, (0,))
    assert model.is_locked(None, (0,)) and model.minimum_windows() == set()


def test_a_lock_may_hold_more_than_its_window_but_never_past_a_tombstone() -> None:
    """INV-21 bounds an engine's SWA-locked pages both ways: at least the last W live tokens
    above each lock (``minimum_windows``), at most its live pages up to the first tombstone
    (``maximum_windows``: caches lock whole nodes, never through a tombstone)."""
    model = SlidingWindowModel(1, 2)
    model.insert(None, (0, 0, 0), (0, 1, 2))
    model.lock(None, (0, 0, 0))
    whole_path = {(None, (0,)), (None, (0, 0)), (None, (0, 0, 0))}
    assert model.minimum_windows() == whole_path - {(None, (0,))}
    assert model.maximum_windows() == whole_path
    model.unlock(None, (0, 0, 0))
    model.insert(None, (1,), (3,))
    # resumes from (1,); (1, 1) left the window
    model.insert(None, (1, 1, 1), (3, 4, 5), prev_prefix_len=1, swa_evicted_seqlen=2)
    assert model.tombstones == {(None, (1, 1))}
    model.lock(None, (1, 1, 1))
    assert model.minimum_windows() == model.maximum_windows() == {(None, (1, 1, 1))}


@pytest.mark.parametrize("victims", [LRU_LEAVES, LRU_SPLIT_REFRESHES_BOTH])
def test_the_swa_model_widens_recency_where_a_split_refreshes_the_lower_half(
    victims: VictimOrder,
) -> None:
    """sglang stamps both halves of a split: after [1, 0, 0] and [0], a match of [1]
    splits the first node, so the leaf [1, 0] may be as recent as the match and [0] may go
    first. Plain LRU (radixkv) keeps [1, 0] at its insert: [0] first is out of order."""
    model = SlidingWindowModel(1, 2, victims)
    model.insert(None, (1, 0, 0), (0, 1, 2))
    model.insert(None, (0,), (3,))
    model.match(None, (1,))
    events: list[FreeEvent] = [("free", (2,)), ("free", (3,))]
    if victims is LRU_LEAVES:
        with pytest.raises(SpecViolation, match="not the lru leaf"):
            model.apply_eviction(2, events, swa_locked=set())
        return
    assert model.apply_eviction(2, events, swa_locked=set()).full_evicted == 2
