"""Run every mutant against the harness and report the score.

Each mutant is applied to a private copy of ``src/``, which is put first on PYTHONPATH
while the machines run under the ``ci`` profile without shrinking. A mutant is *killed*
when the run fails.
Usage: ``python -m mutation [--suite ARGS] [--jobs N] [NAME ...]``.

``--kit`` runs the conformance kit alone instead (mutation/kit.py): ``radixkv check`` of the
caches each mutant's file touches, the ci draw and ``--seeds`` random seeds, with each
mutant's kill rate: ``python -m mutation --kit [--seeds N] [--budget S] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from radixkv_conformance.cli import seconds

from mutation import kit
from mutation.copies import BASELINE, ROOT, apply, environment
from mutation.mutants import MUTANTS, Mutant


def run(mutant: Mutant, suite: list[str] | None = None) -> tuple[Mutant, bool, float, str]:
    """Run a suite (default: the mutant's own) against one mutant.

    Returns (mutant, killed, seconds, last output line).
    """
    suite = suite or mutant.suite.split()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        src = apply(mutant, Path(tmp))
        env = environment(mutant, src)
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *suite]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        lines = proc.stdout.strip().splitlines()
        return (
            mutant,
            proc.returncode == 1,
            time.perf_counter() - started,
            lines[-1] if lines else "",
        )


def count(text: str) -> int:
    """A whole number, zero or more (argparse's type for --seeds)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, zero or more, got {text!r}")
    return int(text)


KIT_OPTIONS: dict[str, object] = {  # the kit-only mode's options, with their defaults
    "seeds": 10,
    "budget": kit.BUDGET,
    "target": [],
    "skip_blind": False,
    "no_baseline": False,
    "timeout": kit.TIMEOUT,
}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__)
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--suite", help="pytest arguments (default: each mutant's own suite)")
    parser.add_argument("--jobs", type=int, help="mutants at a time (default 2; --kit: 1)")
    kit_mode = parser.add_argument_group("kit-only mode (mutation/kit.py)")
    kit_mode.add_argument(
        "--kit", action="store_true", help="run `radixkv check` alone, no example test"
    )
    kit_mode.add_argument(
        "--seeds", type=count, default=10, help="draws past the ci one: seeds 1..N (default 10)"
    )
    kit_mode.add_argument(
        "--budget",
        type=seconds,
        default=kit.BUDGET,
        help="`radixkv check --budget` of each run (default %(default)g)",
    )
    kit_mode.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="MODULE:FACTORY",
        help="check this cache instead of each mutant's own (repeatable)",
    )
    kit_mode.add_argument(
        "--skip-blind", action="store_true", help="leave out the mutants marked kit_blind"
    )
    kit_mode.add_argument(
        "--no-baseline", action="store_true", help="skip the unmutated ci draw of each cache"
    )
    kit_mode.add_argument(
        "--timeout",
        type=seconds,
        default=kit.TIMEOUT,
        help="seconds after which a run is an error (default %(default)g)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):  # each mutant's line reaches a redirected log
        sys.stdout.reconfigure(line_buffering=True)
    args = parser().parse_args(argv)
    unknown = sorted(set(args.names) - {m.name for m in MUTANTS})
    if unknown:
        parser().error(f"no such mutant: {', '.join(unknown)} (mutation/mutants.py)")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.kit:
        return kit.main(
            chosen,
            seeds=args.seeds,
            budget=args.budget,
            jobs=args.jobs or 1,
            targets=args.target,
            skip_blind=args.skip_blind,
            check_baseline=not args.no_baseline,
            timeout=args.timeout,
        )
    kit_only = [
        f"--{o.replace('_', '-')}" for o in KIT_OPTIONS if getattr(args, o) != KIT_OPTIONS[o]
    ]
    if kit_only:
        parser().error(f"{', '.join(kit_only)}: only with --kit")
    suite = args.suite.split() if args.suite else None
    suites = sorted({m.suite for m in chosen}) if suite is None else [" ".join(suite)]
    jobs = args.jobs or 2
    survivors = []
    with ThreadPoolExecutor(jobs) as pool:
        baselines = pool.map(lambda target: (target, run(BASELINE, target.split())), suites)
        for target, (_, failed, seconds, last) in baselines:
            print(f"baseline  {seconds:6.1f}s  {target}: {last}")
            if failed:
                print("the suite fails without any mutant: fix that first")
                return 1
        for mutant, killed, seconds, last in pool.map(lambda m: run(m, suite), chosen):
            print(f"{'killed' if killed else 'SURVIVED':>8}  {seconds:6.1f}s  {mutant.name}")
            if not killed:
                survivors.append(mutant.name)
                print(f"          {last}")
    score = len(chosen) - len(survivors)
    print(f"\nmutation score: {score}/{len(chosen)} killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
