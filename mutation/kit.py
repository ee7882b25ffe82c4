"""The kit-only mode: each mutant against the conformance kit alone (issue 28, item 4).

``python -m mutation --kit [--seeds N] [--budget S] [--jobs N] [NAME ...]`` runs, for each
mutant, ``radixkv check TARGET --incomplete-ok --max-failures 1`` with the mutant's copy of
``src/`` first on PYTHONPATH: once with the settings profile's own draw (the ci draw; the
``mutation`` profile is the ci one without shrinking, which draws the same runs), then once
with ``--seed`` 1 to N. No example test runs. Its targets are the kit's caches that exercise
its file (``KIT_BY_PATH``), or those its ``kit`` field names; with two, a draw stops at the
first that kills.

A run with a finding (exit status 1, its report ending ``FAILED: ...``) kills the mutant; a
pass (0, or 3: incomplete) lets it survive; anything else (2, a timeout, a crash: an uncaught
exception exits 1 too, without that line) is an error, never a kill. A mutant
the kit can see must be killed on at least ``PASS_SHARE`` of the seeds; one with a
``kit_blind`` reason needs an example test, and the report says why beside it (it still
runs, to show the reason holds, unless ``--skip-blind``).

The breadth-first exploration each run starts with is the same on every draw but bounded
in time (a quarter of the budget, at least 10 s): on a busy machine it gets less deep, so a
mutant only it reaches can lose kills to the load, not to the seed.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mutation.copies import BASELINE, apply, environment
from mutation.mutants import KIT_ADAPTERS, KIT_BY_PATH, Mutant

KILLED, SURVIVED, ERROR = "killed", "survived", "error"
PASS_SHARE = 0.9  # of the seeds that must kill a mutant the kit can see (9 of 10)
BUDGET = 20.0  # seconds of `radixkv check --budget` per run (its first search runs whole)
TIMEOUT = 600.0  # seconds after which one run is an error (a mutant that hangs the cache)
FINDING = re.compile(r": finding \d+ \[([^\]]+)\]")  # how `radixkv check` announces one
FAILED = re.compile(r"^FAILED: ", re.MULTILINE)  # ... and ends a run that found one


def targets_for(mutant: Mutant) -> tuple[str, ...]:
    """The kit's caches (MODULE:FACTORY) a mutant runs against: its own, else its file's."""
    return mutant.kit or KIT_BY_PATH.get(mutant.path, ())


def verdict(returncode: int, output: str) -> str:
    """What one `radixkv check` run (its exit status and output) says of the mutant."""
    if returncode == 1 and FAILED.search(output):  # a finding, reported as one
        return KILLED
    if returncode in (0, 3):  # every invariant held (3: some situation never reached)
        return SURVIVED
    # A usage error, a timeout, or a crash: an uncaught exception exits 1 too, without the
    # report's FAILED line. No verdict.
    return ERROR


def required(seeds: int) -> int:
    """Seeds (of ``seeds``) that must kill a mutant the kit can see."""
    return math.ceil(PASS_SHARE * seeds)


def label(target: str) -> str:
    """A kit target, short: ``radixkv:radix_cache``, ``max_trie:factory``."""
    return target.removeprefix(f"{KIT_ADAPTERS}.")


@dataclass(frozen=True)
class Draw:
    """One draw's verdict on a mutant: ``seed`` None is the ci draw."""

    seed: int | None
    outcome: str  # KILLED, SURVIVED or ERROR
    target: str  # the cache that killed it (else the last one run)
    seconds: float
    detail: str = ""  # the finding's id, or what went wrong


@dataclass
class KitResult:
    mutant: Mutant
    targets: tuple[str, ...]
    draws: list[Draw] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def seeded(self) -> list[Draw]:
        return [draw for draw in self.draws if draw.seed is not None]

    @property
    def kills(self) -> int:
        return sum(draw.outcome == KILLED for draw in self.draws)

    @property
    def seed_kills(self) -> int:
        return sum(draw.outcome == KILLED for draw in self.seeded)

    @property
    def errors(self) -> list[Draw]:
        return [draw for draw in self.draws if draw.outcome == ERROR]

    @property
    def blind(self) -> bool:
        return bool(self.mutant.kit_blind)

    @property
    def caught(self) -> bool:
        """Killed on enough seeds, without an error."""
        return not self.errors and self.seed_kills >= required(len(self.seeded))


def check_command(target: str, budget: float, seed: int | None, traces: Path) -> list[str]:
    """The `radixkv check` run of one draw against one cache."""
    command = [sys.executable, "-m", "radixkv_conformance.cli", "check", target]
    command += ["--budget", f"{budget:g}", "--incomplete-ok", "--max-failures", "1"]
    command += ["--traces", str(traces)]
    return command if seed is None else [*command, "--seed", str(seed)]


Runner = Callable[[list[str], dict[str, str], Path, float], tuple[int, str]]


def subprocess_runner(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> tuple[int, str]:
    """Run ``command``: its exit status (-1: timed out) and its stdout and stderr. A run past
    ``timeout`` is ended with whatever it started (its own process group)."""
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return -1, f"timed out after {timeout:g}s"
    return proc.returncode, output


def detail(outcome: str, returncode: int, output: str) -> str:
    """The finding a kill reported, or the last line of what went wrong."""
    if outcome == KILLED:
        found = FINDING.search(output)
        return found.group(1) if found else "a finding"
    if outcome == ERROR:
        lines = output.strip().splitlines()
        return f"exit {returncode}: {lines[-1] if lines else 'no output'}"
    return ""


def run_draw(
    targets: Sequence[str],
    seed: int | None,
    env: dict[str, str],
    workdir: Path,
    budget: float,
    timeout: float = TIMEOUT,
    runner: Runner = subprocess_runner,
) -> Draw:
    """One draw against each target in turn, until one kills (or errs)."""
    started = time.perf_counter()
    outcome, target, said = SURVIVED, "", ""
    for target in targets:
        traces = workdir / "traces" / f"{label(target).replace(':', '-')}-{seed or 'ci'}"
        returncode, output = runner(
            check_command(target, budget, seed, traces), env, workdir, timeout
        )
        outcome = verdict(returncode, output)
        said = detail(outcome, returncode, output)
        if outcome != SURVIVED:
            break
    return Draw(seed, outcome, target, time.perf_counter() - started, said)


def draws(seeds: int) -> list[int | None]:
    """The ci draw, then seeds 1 to ``seeds``."""
    return [None, *range(1, seeds + 1)]


def run_kit(
    mutant: Mutant,
    targets: Sequence[str],
    seeds: int,
    budget: float,
    timeout: float = TIMEOUT,
    runner: Runner = subprocess_runner,
) -> KitResult:
    """Every draw of the kit against one mutant's copy of ``src/``."""
    result = KitResult(mutant, tuple(targets))
    if not targets:
        return result
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mutant-kit-{mutant.name}-") as tmp:
        workdir = Path(tmp)  # the runs' folder too: nothing is written into the checkout
        env = environment(mutant, apply(mutant, workdir))
        for seed in draws(seeds):
            result.draws.append(run_draw(targets, seed, env, workdir, budget, timeout, runner))
    result.seconds = time.perf_counter() - started
    return result


def line(result: KitResult) -> list[str]:
    """One mutant's lines of the report: its kill rates and time, then what to know."""
    seeded = len(result.seeded)
    if not result.targets:
        mark = "blind"
    elif result.errors:
        mark = "ERROR"
    elif result.caught:
        mark = "ok"
    else:
        mark = "blind" if result.blind else "GAP"
    ci = next((draw.outcome for draw in result.draws if draw.seed is None), "-")
    rates = f"{result.kills:>2}/{len(result.draws):<2} seeds {result.seed_kills:>2}/{seeded:<2}"
    lines = [f"{mark:>5}  {rates} ci {ci:<8} {result.seconds:7.1f}s  {result.mutant.name}"]
    caches = ", ".join(map(label, result.targets)) or "none of the kit's"
    found = sorted({draw.detail for draw in result.draws if draw.outcome == KILLED})
    lines.append(f"         caches: {caches}" + (f"; found: {', '.join(found)}" if found else ""))
    for draw in result.errors:
        lines.append(
            f"         error (seed {draw.seed or 'ci'}, {label(draw.target)}): {draw.detail}"
        )
    if result.blind:
        lines.append(f"         kit-blind: {result.mutant.kit_blind}")
        if result.kills:
            lines.append("         (yet the kit killed it: is that reason still true?)")
    return lines


def summary(results: Sequence[KitResult], seeds: int) -> list[str]:
    """How many mutants the kit can see it kills on enough seeds; the gaps, blind, errors."""
    visible = [r for r in results if not r.blind]
    caught = [r for r in visible if r.caught]
    gaps = [r for r in visible if not r.caught and not r.errors]
    errors = [r for r in results if r.errors]
    blind = [r for r in results if r.blind]
    seconds = sum(r.seconds for r in results)
    lines = [
        f"kit-only mutation: {len(caught)}/{len(visible)} mutants the kit can see killed on "
        f"at least {required(seeds)} of {seeds} seeds ({seconds:.0f}s of runs)"
    ]
    if gaps:
        rates = ", ".join(f"{r.mutant.name} {r.seed_kills}/{seeds}" for r in gaps)
        lines.append(f"  kit gaps (killed on fewer seeds): {rates}")
    if errors:
        lines.append(f"  errors (no verdict): {', '.join(r.mutant.name for r in errors)}")
    if blind:
        lines.append(
            f"  kit-blind, an example test needed: {', '.join(r.mutant.name for r in blind)}"
        )
    return lines


def baseline(targets: Iterable[str], budget: float, timeout: float) -> list[str]:
    """The ci draw of each target on an unmutated copy: what it found (nothing, if sound)."""
    problems = []
    for target in dict.fromkeys(targets):
        result = run_kit(BASELINE, (target,), 0, budget, timeout)
        draw = result.draws[0]
        print(f"baseline  {draw.seconds:6.1f}s  {label(target)}: {draw.outcome} {draw.detail}")
        if draw.outcome != SURVIVED:
            problems.append(f"{label(target)}: {draw.outcome} {draw.detail}")
    return problems


def main(
    chosen: Sequence[Mutant],
    *,
    seeds: int,
    budget: float,
    jobs: int,
    targets: Sequence[str] = (),
    skip_blind: bool = False,
    check_baseline: bool = True,
    timeout: float = TIMEOUT,
) -> int:
    """Run the kit-only mode and print its report; 0 when every mutant the kit can see is
    killed on enough seeds and no run erred."""
    planned = [(m, tuple(targets) or targets_for(m)) for m in chosen]
    if skip_blind:
        planned = [(m, t) for m, t in planned if not m.kit_blind]
    unmapped = [m.name for m, t in planned if not t and not m.kit_blind]
    if unmapped:  # tests/kit/test_mutation_kit.py keeps this from happening
        print(f"no kit cache, no kit_blind reason (mutation/mutants.py): {', '.join(unmapped)}")
        return 2
    drawn = f"the ci draw and seeds 1-{seeds}" if seeds else "the ci draw"
    print(
        f"kit-only mutation: {len(planned)} mutants, {drawn} each, "
        f"`radixkv check --budget {budget:g}` per run, {jobs} at a time"
    )
    if check_baseline:
        problems = baseline((t for _, ts in planned for t in ts), budget, timeout)
        if problems:
            print(f"the kit fails without any mutant: fix that first ({'; '.join(problems)})")
            return 1
    results = []
    with ThreadPoolExecutor(jobs) as pool:
        runs = pool.map(lambda plan: run_kit(plan[0], plan[1], seeds, budget, timeout), planned)
        for result in runs:
            print("\n".join(line(result)))
            results.append(result)
    print()
    print("\n".join(summary(results, seeds)))
    failing = [r for r in results if r.errors or not (r.blind or r.caught)]
    return 1 if failing else 0
