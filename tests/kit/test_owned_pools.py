"""Pools that own their blocks, as engines build them: the block of an insert's unaligned tail
(profile ``unaligned_tail``), refusals a pool without ``capacity`` never shows (the situation
``alloc-refused`` left unreached, exit 3), and the runs an adapter ends itself (counted when
it says ``NotAdmitted``, a usage error when it calls ``hypothesis.reject()``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import reject, settings
from radixkv_conformance import AdapterError, NoRoom, NotAdmitted, run_conformance
from radixkv_conformance.adapters import block_pool
from radixkv_conformance.cli import INCOMPLETE, USAGE, main
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import Host, Indices, Inserted
from radixkv_conformance.replay import replay

from tests.kit.test_block_pool import RecordingHost

TAIL = block_pool.PROFILES["vllm_tail"]
SMALL = settings(max_examples=30, stateful_step_count=12, deadline=None, database=None)
TINY = settings(SMALL, max_examples=2, stateful_step_count=3, derandomize=True)
settings.register_profile("owned-pools-tiny", TINY)
settings.register_profile("owned-pools-small", settings(SMALL, derandomize=True))


def _trace(*steps: dict[str, Any], page_size: int = 2) -> dict[str, Any]:
    return {
        "format": "radixkv-trace/1",
        "semantics": TAIL.name,
        "mode": "plain",
        "page_size": page_size,
        "steps": [{"id": i, **step} for i, step in enumerate(steps)],
    }


def _insert(*tokens: int) -> dict[str, Any]:
    return {"op": "insert", "tokens": list(tokens), "namespace": None, "indices": []}


# Two blocks of two tokens: [1, 1] cached and held, then [2, 2, 3] asks for a full block
# and a block for its tail: one free block, so the pool must refuse it.
HELD_THEN_TAIL = _trace(_insert(1, 1), {"op": "lock", "node": 0}, _insert(2, 2, 3))


def test_an_unaligned_tail_takes_a_block_that_is_free_again_afterwards() -> None:
    host = RecordingHost()  # page size 2
    pool = block_pool.vllm_tail(2, host, blocks=2)
    got = pool.insert((1, 1, 2), None, ())
    assert got.indices == (0, 1)  # the key's full block only; the tail's is nobody's
    assert pool.pool.num_free_blocks() == 2 and host.freed == []  # both queued, none evicted
    assert block_pool.factory(2, host, blocks=1).insert((1, 1, 2), None, ()).indices
    with pytest.raises(NoRoom):  # the same key needs two blocks as vLLM counts
        block_pool.vllm_tail(2, host, blocks=1).insert((1, 1, 2), None, ())


def test_inv15_counts_the_tail_block_only_under_its_policy() -> None:
    tail = functools.partial(block_pool.vllm_tail, blocks=2)
    assert replay(HELD_THEN_TAIL, tail, TAIL).passed
    alarm = replay(HELD_THEN_TAIL, tail, block_pool.PROFILE)  # the policy left out
    assert alarm.finding == "INV-15:insert-refusal-with-room", alarm


@pytest.mark.parametrize(
    ("bug", "trace", "finding"),
    [
        # the kept tail block shrinks the pool: the next insert is refused with room
        (
            "tail_kept",
            _trace(_insert(1, 1, 2), _insert(3, 3, 4)),
            "INV-15:insert-refusal-with-room",
        ),
        # admitted without the tail's block: the allocation fails half way
        ("tail_uncounted", _trace(_insert(1, 1, 2), _insert(3, 3)), None),
    ],
)
def test_each_tail_bug_fails_its_trace_and_the_pool_without_it_passes(
    bug: str, trace: dict[str, Any], finding: str | None
) -> None:
    clean = functools.partial(block_pool.vllm_tail, blocks=1 if bug == "tail_uncounted" else 2)
    assert replay(trace, clean, TAIL).passed
    found = replay(trace, functools.partial(clean, bugs=bug), TAIL)
    assert not found.passed, found
    if finding is not None:
        assert found.finding == finding, found


def test_a_tail_policy_needs_a_cache_that_allocates() -> None:
    with pytest.raises(ValueError, match="unaligned_tail must be caller or block"):
        TAIL.but(unaligned_tail="partial")
    with pytest.raises(ValueError, match="is for a cache that allocates"):
        RADIXKV.but(unaligned_tail="block")


# ---- a pool without capacity: refusals never checked ------------------------------------------


def _uncapped(page_size: int, host: Host) -> block_pool.BlockPoolAdapter:
    """The block pool, its ``capacity`` claim withdrawn: it never says ``NoRoom`` (it
    allocates from a pool too large to fill)."""
    pool = block_pool.factory(page_size, host, blocks=64)
    pool.capabilities = pool.capabilities - {"capacity"}
    return pool


UNCAPPED = "tests.kit.test_owned_pools:_uncapped"


@pytest.mark.search
def test_a_pool_without_capacity_does_not_pass_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "owned-pools-tiny")
    args = ["check", UNCAPPED, "--profile", "radixkv_conformance.adapters.block_pool:PROFILE"]
    args += ["--budget", "0.01", "--explore", "none", "--traces", str(tmp_path)]
    assert main(args) == INCOMPLETE
    out = capsys.readouterr().out
    assert "refusals were not checked" in out and "alloc-refused" in out
    accepted = run_conformance(
        _uncapped, profile=block_pool.PROFILE, settings=TINY, uncovered_ok=["alloc-refused"]
    )
    assert "alloc-refused" not in accepted.coverage.missing
    assert "refusals were not checked" not in accepted.render()


# ---- runs an adapter ends ---------------------------------------------------------------------


class _Ends(block_pool.BlockPoolAdapter):
    """The block pool whose scheduler will not take an insert of three pages or more."""

    how: str = "not-admitted"

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        if len(tokens) >= 3 * self.page_size:
            if self.how == "reject":
                reject()  # what the guide's vLLM example once did: the run vanishes
            raise NotAdmitted("the scheduler leaves it waiting")
        return super().insert(tokens, namespace, indices)


def _ending(how: str, page_size: int, host: Host) -> _Ends:
    adapter = _Ends(page_size, host, 4, frozenset())
    adapter.how = how
    return adapter


@pytest.mark.search
def test_runs_ended_by_not_admitted_are_counted_and_printed() -> None:
    report = run_conformance(
        functools.partial(_ending, "not-admitted"), profile=block_pool.PROFILE, settings=SMALL
    )
    ended = report.stats["runs ended by the adapter: NotAdmitted"]
    assert report.passed and ended > 0
    assert f"runs ended by the adapter: NotAdmitted {ended:>7}".replace(" ", "") in (
        report.render().replace(" ", "")
    )


@pytest.mark.search
def test_a_run_an_adapter_rejects_itself_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AdapterError, match=r"hypothesis.reject\(\).*NotAdmitted.*NoRoom"):
        run_conformance(
            functools.partial(_ending, "reject"), profile=block_pool.PROFILE, settings=SMALL
        )
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "owned-pools-small")
    target = "tests.kit.test_owned_pools:rejecting"
    args = ["check", target, "--profile", "radixkv_conformance.adapters.block_pool:PROFILE"]
    args += ["--budget", "0.01", "--explore", "none", "--traces", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(args)
    assert exited.value.code == USAGE
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "NotAdmitted" in errors[0] and "NoRoom" in errors[0], errors


rejecting = functools.partial(_ending, "reject")
