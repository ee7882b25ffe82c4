"""Findings acknowledged by cause (``--known TRACE.json``, ``causes.py``): a run that hits
the acknowledged id by the acknowledged cause goes on; one that hits it by another cause is
reported, "same symptom, another cause", where acknowledging the id would have hidden it."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from radixkv_conformance import run_conformance
from radixkv_conformance.adapters import block_pool
from radixkv_conformance.causes import shape
from radixkv_conformance.cli import FAILED, INCOMPLETE, PASSED, main

from tests.helpers import fixed_search

TAIL = block_pool.PROFILES["vllm_tail"]
SYMPTOM = "INV-15:insert-refusal-with-room"
SEARCH = fixed_search(150, 8)
HELD = "ValueError:reset@block_pool.reset"  # the kept block's other symptom: acknowledged


def _trace(page_size: int, *steps: dict[str, Any], finding: str = SYMPTOM) -> dict[str, Any]:
    return {
        "format": "radixkv-trace/1",
        "semantics": TAIL.name,
        "mode": "plain",
        "page_size": page_size,
        "failure": {"check": "insert: refusal", "finding": finding, "message": "", "step": None},
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }


def _insert(*tokens: int) -> dict[str, Any]:
    return {"op": "insert", "tokens": list(tokens), "namespace": None, "indices": []}


# tail_kept: each unaligned insert keeps its tail block, so the second is refused with room
KEPT_TAIL = _trace(2, _insert(1, 1, 2), _insert(3, 3, 4))
# the tail policy left out: a rightly refused insert (one block held, a tail to place)
NO_POLICY = _trace(2, _insert(1, 1), {"op": "lock", "node": 0}, _insert(2, 2, 3))


def test_a_cause_is_its_operations_in_order_whatever_their_arguments() -> None:
    other_keys = _trace(4, _insert(3, 3, 3, 3, 8), {**_insert(6), "namespace": "a"})
    assert shape(KEPT_TAIL) == shape(other_keys)
    assert shape(KEPT_TAIL) == shape(_trace(2, _insert(1, 3), _insert(1, 3, 1), _insert(3)))
    assert shape(KEPT_TAIL) != shape(NO_POLICY)  # a lock between the inserts
    bad = {**_insert(1), "bad": "insert with a value shorter than the key"}
    assert shape(_trace(2, _insert(1, 1, 2), bad)) != shape(KEPT_TAIL)
    other_id = _trace(2, _insert(1, 1, 2), _insert(3, 3, 4), finding="INV-15:other")
    assert shape(KEPT_TAIL) != shape(other_id)


KEPT = functools.partial(block_pool.vllm_tail, blocks=2, bugs="tail_kept")


@pytest.mark.search
def test_the_acknowledged_cause_goes_on_and_another_cause_is_reported() -> None:
    check = functools.partial(run_conformance, KEPT, profile=TAIL, settings=SEARCH)
    found = check(known=[HELD])
    assert [f.finding for f in found.failures] == [SYMPTOM], found.render()
    trace = found.failures[0].trace  # what the kit wrote: the trace a user acknowledges
    assert check(known=[HELD, SYMPTOM]).passed  # the id acknowledged: any cause is hidden
    mine = check(known=[HELD], known_traces=[("k", trace)])
    assert mine.passed and mine.acknowledged[SYMPTOM] > 0, mine.render()
    other = check(known=[HELD], known_traces=[("no-policy.json", NO_POLICY)])
    assert [f.finding for f in other.failures] == [SYMPTOM], other.render()
    failure = other.failures[0]
    assert failure.message.startswith("same symptom as no-policy.json, another cause")
    assert shape(failure.trace) == shape(trace)


@pytest.mark.search
def test_known_takes_a_trace_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "causes-search")
    settings.register_profile("causes-search", settings(SEARCH, derandomize=True))
    target = "radixkv_conformance.adapters.block_pool:vllm_tail"
    args = ["check", target, "--option", "blocks=2", "--option", "bugs=tail_kept"]
    args += ["--budget", "0.01", "--explore", "none", "--traces", str(tmp_path / "out")]
    args += ["--known", HELD]
    assert main(args) == FAILED
    (written,) = (tmp_path / "out").glob("*.json")  # the finding's trace, as the kit wrote it
    capsys.readouterr()
    # no finding now (a search this short leaves situations unreached: exit 3, not 1)
    assert main([*args, "--known", str(written)]) in (PASSED, INCOMPLETE)
    assert "finding" not in capsys.readouterr().out
    other = tmp_path / "no-policy.json"
    other.write_text(json.dumps(NO_POLICY))
    assert main([*args, "--known", str(other)]) == FAILED
    with pytest.raises(SystemExit):  # a trace that is not there: a usage error
        main([*args, "--known", str(tmp_path / "missing.json")])
