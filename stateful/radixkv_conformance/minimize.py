"""Trace minimization: delete every step a finding does not need, by replaying.

Hypothesis shrinks the choices that built a run, and a rule that draws a handle from a
bundle can stop it from deleting the step that made the handle (the indices of the later
draws move). Steps that hit acknowledged findings, refresh bursts of empty keys and no-op
matches then stay in a reported trace. ``minimize`` finishes the job on the trace itself,
delta-debugging style: it deletes chunks of steps, halving the chunk size, and keeps a
deletion when the replay still fails with the same finding id. A deleted step takes with it
every step that uses its handle (a ``lock`` of its node, the ``unlock`` of that lock).

The result keeps the document's header and takes the steps, failure and ``known`` of the
replay machine's own document of the last failing replay: its step ids are contiguous, its
expectations are the spec's for the shorter run, and ``known`` lists only the acknowledged
ids that run still hits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from radixkv_conformance.profile import Profile
from radixkv_conformance.protocol import AdapterFactory
from radixkv_conformance.replay import replay
from radixkv_conformance.session import IllegalStep
from radixkv_conformance.trace import Step, upgraded

HANDLE_FIELDS = ("node", "lock")  # fields that name the step whose handle a step uses
BUDGET_SECONDS = 20.0


def minimize(
    document: dict[str, Any],
    factory: AdapterFactory,
    profile: Profile | None = None,
    known: Iterable[str] | None = None,
    budget_s: float = BUDGET_SECONDS,
) -> dict[str, Any]:
    """The shortest trace found that still fails ``factory`` with the document's finding.

    Returns ``document`` itself if it does not fail that way on replay (nothing to shrink
    against); a shorter trace is in the format written now (``trace.upgraded``).
    ``budget_s`` bounds the replays; what was deleted by then stays deleted.
    """
    given, document = document, upgraded(document)
    acknowledged = tuple(document.get("known", ()) if known is None else known)
    target = document["failure"].get("finding")  # None in traces older than finding ids
    best: dict[str, Any] | None = None  # the document of the last replay that still failed
    hit: set[str] = set()  # the acknowledged ids that replay went past

    def fails(steps: Sequence[Step]) -> bool:
        nonlocal target, best, hit
        try:
            result = replay({**document, "steps": list(steps)}, factory, profile, acknowledged)
        except IllegalStep:  # the cut took what made a later step legal
            return False
        target = target or result.finding  # an old trace's finding: what it fails with
        if result.passed or result.finding != target or result.trace is None:
            return False
        best, hit = _with_header(document, result.trace), set(result.acknowledged)
        return True

    if not fails(document["steps"]):
        return given
    steps = list(document["steps"])
    deadline = time.perf_counter() + budget_s
    chunk = max(1, len(steps) // 2)
    while time.perf_counter() < deadline:
        steps, shrunk = _delete_chunks(steps, chunk, fails, deadline)
        if chunk == 1 and not shrunk:
            break
        chunk = max(1, chunk // 2)
    assert best is not None  # set by the first replay, and by every deletion kept
    return _keep_hit_known_only(best, sorted(hit), factory, profile)


def _delete_chunks(
    steps: list[Step], chunk: int, fails: Callable[[Sequence[Step]], bool], deadline: float
) -> tuple[list[Step], bool]:
    """One pass deleting ``chunk`` steps at a time, from the end (later steps depend on
    earlier ones, so deleting them first frees the most). A deletion never touches the
    steps before it: the steps that use a deleted handle all come after it."""
    shrunk = False
    end = len(steps)
    while end > 0 and time.perf_counter() < deadline:
        start = max(0, end - chunk)
        candidate = without(steps, {steps[i]["id"] for i in range(start, end)})
        if fails(candidate):
            steps, shrunk = candidate, True
        end = start
    return steps, shrunk


def without(steps: Sequence[Step], removed: set[int]) -> list[Step]:
    """``steps`` less those in ``removed`` and every step that uses a removed step's handle."""
    gone = set(removed)
    kept = []
    for step in steps:
        if step["id"] in gone or any(step.get(f) in gone for f in HANDLE_FIELDS):
            gone.add(step["id"])
        else:
            kept.append(step)
    return kept


def _keep_hit_known_only(
    document: dict[str, Any], hit: list[str], factory: AdapterFactory, profile: Profile | None
) -> dict[str, Any]:
    """The document with ``known`` cut to ``hit``, the ids its replay went past (when the
    cut replay fails the same way: an acknowledged id may matter without being hit)."""
    if hit == sorted(document.get("known", ())):
        return document
    again = replay({**document, "known": hit}, factory, profile)
    same = not again.passed and again.finding == document["failure"]["finding"]
    return _with_header(document, again.trace) if same and again.trace is not None else document


def _with_header(document: dict[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
    """``document``'s header (who was checked, under what) with ``replayed``'s run."""
    run = ("failure", "known", "came_past", "steps")
    out = {k: v for k, v in document.items() if k not in run}
    out.update({k: replayed[k] for k in run if k in replayed})
    return out
