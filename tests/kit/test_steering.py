"""After the first search, the budget goes where the run has looked least: runs that reach
rarely reached situations and rarely run pairs of consecutive operations score higher
(``Probe.rarity``, ``Probe.pair_rarity``, ``ConformanceMachine.teardown``)."""

from __future__ import annotations

import copy
from collections import Counter

from radixkv_conformance.coverage import Probe
from radixkv_spec.model import PrefixCacheModel


def _probe(pairs: Counter[str]) -> Probe:
    return Probe(1, (), Counter(), pairs)


def test_a_run_scores_its_pairs_by_how_rarely_the_session_ran_them() -> None:
    pairs: Counter[str] = Counter()
    model = PrefixCacheModel(1)
    common = _probe(pairs)
    for op in ("insert", "match", "insert", "match"):
        common.open({"id": 0, "op": op}, model)
    assert pairs == Counter({"start>insert": 1, "insert>match": 2, "match>insert": 1})
    rare = _probe(pairs)
    for op in ("insert", "evict", "insert"):
        rare.open({"id": 0, "op": op}, model)
    assert rare.seen_pairs == {"start>insert", "insert>evict", "evict>insert"}
    # an eviction between inserts ran once; insert then match ran twice
    assert rare.pair_rarity() > _probe(pairs).pair_rarity() == 0
    again = _probe(pairs)
    for op in ("insert", "match"):
        again.open({"id": 0, "op": op}, model)
    assert rare.pair_rarity() > again.pair_rarity()


def test_a_forked_run_counts_into_the_same_tally() -> None:
    pairs: Counter[str] = Counter()
    model = PrefixCacheModel(1)
    probe = _probe(pairs)
    probe.open({"id": 0, "op": "insert"}, model)
    fork = copy.deepcopy(probe)
    fork.open({"id": 1, "op": "reset"}, model)
    assert fork.pairs is pairs and pairs["insert>reset"] == 1
    assert "insert>reset" in fork.seen_pairs and "insert>reset" not in probe.seen_pairs
