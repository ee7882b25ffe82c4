"""Replay every trace in tests/vectors/ against the implementations its ``outcomes`` name.

A vector is a shrunk failing run (FORMAT.md). ``"pass"`` means every check must hold on that
implementation (radixkv's regressions), ``"fail"`` that the recorded check must fail again
(documentation of another engine's behaviour; skipped when that engine is not importable).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from radixkv_conformance.profile import PROFILES, RADIXKV, Profile
from radixkv_conformance.replay import replay
from radixkv_conformance.trace import load

VECTORS = sorted((Path(__file__).resolve().parents[1] / "vectors").glob("*.json"))
CASES = [
    pytest.param(path, target, outcome, id=f"{path.stem}@{target.rsplit('.', 1)[-1]}")
    for path in VECTORS
    for target, outcome in load(path)["outcomes"].items()
]


def _factory(target: str) -> tuple[object, Profile | None]:
    """The factory ``MODULE:ATTR`` and the profile its module declares for it (or None)."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as missing:  # an engine that is absent (sglang, a pymllm checkout)
        pytest.skip(f"{target} is not importable: {missing}")
    per_factory = getattr(module, "PROFILES", None)
    declared = per_factory.get(attr) if isinstance(per_factory, dict) else None
    return getattr(module, attr), declared or getattr(module, "PROFILE", None)


def test_there_are_vectors() -> None:
    assert VECTORS, "tests/vectors/ holds no traces"


@pytest.mark.parametrize(("path", "target", "outcome"), CASES)
def test_vector_replays_to_its_recorded_outcome(path: Path, target: str, outcome: str) -> None:
    document = load(path)
    factory, declared = _factory(target)
    # a peer's vector names the peer's own profile; radixkv's cache replays it under its own
    profile = declared or PROFILES.get(document["profile"], RADIXKV)
    # a vector past acknowledged findings names them (``known``); replay reads them itself
    result = replay(document, factory, profile)  # type: ignore[arg-type]  # an AdapterFactory by contract
    if outcome == "pass":
        assert result.passed, f"{path.name} on {target}: {result.check}: {result.message}"
    else:
        assert not result.passed, f"{path.name} on {target} no longer fails"
        assert result.invariant == document["failure"]["invariant"], result.message
        assert result.finding == document["failure"]["finding"], result  # the same finding
        # ``steps`` counts the steps whose checks all held: the failing one is the next
        assert result.steps == document["failure"]["step"], "it fails at a different step"
