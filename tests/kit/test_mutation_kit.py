"""The kit-only mutation mode's pieces (mutation/kit.py), without a real kit run: which kit
caches each mutant meets, what an exit status says, how a draw and the report read."""

from __future__ import annotations

from pathlib import Path

import pytest
from radixkv_conformance.targets import OWN

from mutation import __main__ as cli
from mutation import kit
from mutation.copies import ROOT
from mutation.kit import ERROR, KILLED, SURVIVED, Draw, KitResult
from mutation.mutants import (
    KIT_ADAPTERS,
    KIT_BY_PATH,
    KIT_CHUNK,
    KIT_MAMBA,
    KIT_RADIX,
    KIT_SWA,
    KIT_TRIE,
    MUTANTS,
    Mutant,
)

OWN_TARGETS = {target for _, target in OWN}
RADIX = MUTANTS[0]  # lock-not-propagated-to-root, in tree.py
BLIND = Mutant("blind-one", "src/radixkv/tree.py", "", "", kit_blind="needs a fake clock")


def test_every_mutant_meets_a_kit_cache_or_says_why_not() -> None:
    unmapped = [m.name for m in MUTANTS if not kit.targets_for(m) and not m.kit_blind]
    assert unmapped == []
    for mutant in MUTANTS:
        assert set(kit.targets_for(mutant)) <= OWN_TARGETS, mutant.name
        assert mutant.kit_blind == mutant.kit_blind.strip()


def test_the_path_map_names_real_files_and_the_kits_caches() -> None:
    for path, targets in KIT_BY_PATH.items():
        assert (ROOT / path).is_file(), path
        assert targets and set(targets) <= OWN_TARGETS, path
    assert {KIT_RADIX, KIT_SWA, KIT_MAMBA, KIT_TRIE, KIT_CHUNK} <= OWN_TARGETS


def test_a_mutants_own_kit_field_wins_over_its_file() -> None:
    by_name = {m.name: m for m in MUTANTS}
    assert kit.targets_for(by_name["swa-window-check-off-by-one"]) == (KIT_SWA,)
    assert kit.targets_for(by_name["mamba-lru-touch-missing"]) == (KIT_MAMBA,)
    assert kit.targets_for(by_name["evicts-locked-leaf"]) == (KIT_RADIX,)
    # in tree.py and radix_cache.py, but only the trie trims, only Mamba copies on write
    assert kit.targets_for(by_name["tree-trim-keeps-evictable-size"]) == (KIT_TRIE,)
    assert kit.targets_for(by_name["cow-at-exhaustion-makes-no-room"]) == (KIT_MAMBA,)
    # each policy's code is checked by that policy's cache
    for name, policy in (("lfu-ignores-hit-counts", "lfu"), ("fifo-orders-by-node-id", "fifo")):
        assert kit.targets_for(by_name[name]) == (f"{KIT_ADAPTERS}.radixkv:policy_{policy}",)


REPORT = "\nRadixCache: 1 finding(s)\n\nFAILED: RadixCache\n"
CRASH = 'Traceback (most recent call last):\n  ...\nNameError: name "x" is not defined\n'


@pytest.mark.parametrize(
    ("status", "output", "outcome"),
    [
        (1, REPORT, KILLED),
        (1, CRASH, ERROR),  # an uncaught exception exits 1 too: no finding, no kill
        (1, "", ERROR),
        (0, "all invariants held", SURVIVED),
        (3, "held, incomplete", SURVIVED),
        (2, "radixkv check: error: unknown --profile", ERROR),
        (2, REPORT, ERROR),
        (-1, "timed out after 600s", ERROR),
        (-9, "", ERROR),
        (4, "", ERROR),
    ],
)
def test_only_a_reported_finding_kills(status: int, output: str, outcome: str) -> None:
    assert kit.verdict(status, output) == outcome


def test_nine_of_ten_seeds() -> None:
    assert [kit.required(n) for n in (10, 20, 1, 0, 5)] == [9, 18, 1, 0, 5]


class Script:
    """A fake `radixkv check`: one exit status and output per call, in order."""

    def __init__(self, *replies: tuple[int, str]) -> None:
        self.replies = list(replies)
        self.commands: list[list[str]] = []

    def __call__(
        self, command: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> tuple[int, str]:
        self.commands.append(command)
        return self.replies.pop(0)


FOUND = (
    "RadixCache (SWA): finding 1 [INV-7:swa-window]: the window is short\n  trace: x.json\n"
    "\nFAILED: RadixCache (SWA)\n"
)


def test_a_draw_runs_its_caches_in_turn_until_one_kills(tmp_path: Path) -> None:
    script = Script((3, "held, incomplete"), (1, FOUND))
    draw = kit.run_draw((KIT_RADIX, KIT_SWA), 4, {}, tmp_path, 20.0, runner=script)
    assert (draw.seed, draw.outcome, draw.target, draw.detail) == (
        4,
        KILLED,
        KIT_SWA,
        "INV-7:swa-window",
    )
    first, second = script.commands
    assert first[first.index("check") + 1] == KIT_RADIX
    assert second[second.index("check") + 1] == KIT_SWA
    for flags in (["--seed", "4"], ["--budget", "20"], ["--max-failures", "1"]):
        assert any(first[i : i + 2] == flags for i in range(len(first))), flags
    assert "--incomplete-ok" in first


def test_the_ci_draw_passes_no_seed_and_a_kill_stops_the_draw(tmp_path: Path) -> None:
    script = Script((1, FOUND))
    draw = kit.run_draw((KIT_RADIX, KIT_SWA), None, {}, tmp_path, 20.0, runner=script)
    assert draw.outcome == KILLED and draw.target == KIT_RADIX
    assert len(script.commands) == 1 and "--seed" not in script.commands[0]


def test_a_crash_is_an_error_not_a_kill(tmp_path: Path) -> None:
    script = Script((2, "usage: ...\nradixkv check: error: unknown --profile"), (1, FOUND))
    draw = kit.run_draw((KIT_RADIX, KIT_SWA), 1, {}, tmp_path, 20.0, runner=script)
    assert draw.outcome == ERROR
    assert draw.detail == "exit 2: radixkv check: error: unknown --profile"
    assert len(script.commands) == 1  # no verdict: the next cache is not asked
    crashed = kit.run_draw((KIT_RADIX,), 2, {}, tmp_path, 20.0, runner=Script((1, CRASH)))
    assert (crashed.outcome, crashed.detail) == (
        ERROR,
        'exit 1: NameError: name "x" is not defined',
    )


def test_every_draw_of_a_mutant_runs_against_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[Path] = []

    def environment(mutant: Mutant, src: Path) -> dict[str, str]:
        copies.append(src)
        return {"PYTHONPATH": str(src)}

    monkeypatch.setattr(kit, "environment", environment)
    replies = [(1, FOUND), (0, "held"), (1, FOUND), (3, "held")]
    seen: list[tuple[list[str], dict[str, str]]] = []

    def runner(
        command: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> tuple[int, str]:
        seen.append((command, env))
        return replies.pop(0)

    result = kit.run_kit(RADIX, (KIT_RADIX,), 3, 20.0, runner=runner)
    assert [d.seed for d in result.draws] == [None, 1, 2, 3]
    assert [d.outcome for d in result.draws] == [KILLED, SURVIVED, KILLED, SURVIVED]
    assert (result.kills, result.seed_kills) == (2, 1)
    (src,) = copies
    mutated = (src / "radixkv" / "tree.py").read_text() if src.exists() else None
    assert mutated is None  # the copy lived only as long as the runs
    assert all(env["PYTHONPATH"] == str(src) for _, env in seen)


def result_of(mutant: Mutant, outcomes: list[str], detail: str = "INV-1:x") -> KitResult:
    draws = [
        Draw(seed, outcome, KIT_RADIX, 2.0, detail if outcome != SURVIVED else "")
        for seed, outcome in zip(kit.draws(len(outcomes) - 1), outcomes, strict=True)
    ]
    return KitResult(mutant, (KIT_RADIX,), draws, 2.0 * len(draws))


def test_the_report_line_says_kill_rates_and_time() -> None:
    caught = result_of(RADIX, [KILLED] * 10 + [SURVIVED])  # ci + seeds 1-9 killed, 10 not
    first, second = kit.line(caught)
    assert first.split() == [
        "ok",
        "10/11",
        "seeds",
        "9/10",
        "ci",
        "killed",
        "22.0s",
        RADIX.name,
    ]
    assert second.split() == ["caches:", "radixkv:radix_cache;", "found:", "INV-1:x"]
    gap = result_of(RADIX, [KILLED] * 9 + [SURVIVED] * 2)  # seeds: 8 of 10
    assert kit.line(gap)[0].split()[:4] == ["GAP", "9/11", "seeds", "8/10"]


def test_a_blind_mutant_says_why_and_an_error_is_no_pass() -> None:
    blind = result_of(BLIND, [SURVIVED] * 11)
    lines = kit.line(blind)
    assert lines[0].split()[0] == "blind"
    assert "kit-blind: needs a fake clock" in lines[-1]
    erred = result_of(RADIX, [KILLED] * 10 + [ERROR], detail="exit 2: boom")
    mark, *_ = kit.line(erred)[0].split()
    assert mark == "ERROR" and not erred.caught
    assert any("error (seed 10, radixkv:radix_cache): exit 2: boom" in x for x in kit.line(erred))


def test_the_summary_counts_the_mutants_the_kit_can_see() -> None:
    results = [
        result_of(RADIX, [KILLED] * 11),
        result_of(MUTANTS[1], [SURVIVED] * 4 + [KILLED] * 7),  # 7 of 10 seeds
        result_of(BLIND, [SURVIVED] * 11),
    ]
    head, gaps, blind = kit.summary(results, 10)
    assert head.startswith("kit-only mutation: 1/2 mutants the kit can see killed on at least 9")
    assert gaps.endswith(f"{MUTANTS[1].name} 7/10")
    assert blind.endswith("blind-one")


def test_the_exit_status_is_the_kit_contract(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = {RADIX.name: [KILLED] * 11, BLIND.name: [SURVIVED] * 11}

    def fake(mutant: Mutant, targets: tuple[str, ...], seeds: int, *_: object) -> KitResult:
        return result_of(mutant, outcomes[mutant.name])

    monkeypatch.setattr(kit, "run_kit", fake)
    assert kit.main([RADIX, BLIND], seeds=10, budget=5, jobs=1, check_baseline=False) == 0
    outcomes[RADIX.name] = [KILLED] * 3 + [SURVIVED] * 8
    assert kit.main([RADIX], seeds=10, budget=5, jobs=1, check_baseline=False) == 1
    out = capsys.readouterr().out
    assert "kit gaps (killed on fewer seeds): lock-not-propagated-to-root 2/10" in out
    unmapped = Mutant("nowhere", "src/radixkv/allocator.py", "", "")
    assert kit.main([unmapped], seeds=10, budget=5, jobs=1, check_baseline=False) == 2


def test_the_command_line_keeps_the_kit_options_to_the_kit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["--seeds", "3"], ["--kit", "--budget", "0"], ["--kit", "no-such-mutant"]):
        with pytest.raises(SystemExit) as raised:
            cli.main(argv)
        assert raised.value.code == 2, argv
    err = capsys.readouterr().err
    assert "--seeds: only with --kit" in err
    assert "expected seconds above zero" in err
    assert "no such mutant: no-such-mutant" in err
