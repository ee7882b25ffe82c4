"""Run every mutant against the harness and report the score.

Each mutant is applied to a private copy of ``src/``, which is put first on PYTHONPATH
while the machines run under the ``ci`` profile without shrinking. A mutant is *killed*
when the run fails.
Usage: ``python -m mutation [--suite ARGS] [--jobs N] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mutation.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parent.parent


BASELINE = Mutant("baseline", "src/radixkv/__init__.py", "", "")


def apply(mutant: Mutant, workdir: Path) -> Path:
    """Copy ``src/`` into ``workdir`` with the mutant's one change; return the new src."""
    src = workdir / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    target = src / Path(mutant.path).relative_to("src")
    text = target.read_text()
    if mutant is BASELINE:
        return src
    found = text.count(mutant.old)
    if found != 1:
        raise SystemExit(f"mutant {mutant.name}: its text occurs {found} times in {mutant.path}")
    target.write_text(text.replace(mutant.old, mutant.new))
    return src


def run(mutant: Mutant, suite: list[str] | None = None) -> tuple[Mutant, bool, float, str]:
    """Run a suite (default: the mutant's own) against one mutant.

    Returns (mutant, killed, seconds, last output line).
    """
    suite = suite or mutant.suite.split()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        src = apply(mutant, Path(tmp))
        env = {
            **os.environ,
            # this checkout's spec and kit too, not whatever copy an environment installed
            "PYTHONPATH": os.pathsep.join(map(str, (src, ROOT / "spec", ROOT / "stateful", ROOT))),
            "HYPOTHESIS_PROFILE": "mutation",
            # The mutants are of the Python reference; a compiled helper built in place
            # (setup.py build_ext --inplace) would bypass the list-key path they change.
            "RADIXKV_PURE": "1",
        }
        probe = [sys.executable, "-c", "import radixkv; print(radixkv.__file__)"]
        where = subprocess.run(probe, env=env, capture_output=True, text=True)
        if where.returncode:
            error = where.stderr.strip().splitlines()[-1:]
            raise SystemExit(f"mutant {mutant.name} does not even import: {error}")
        if not where.stdout.startswith(str(src)):
            raise SystemExit(f"the mutated copy is not the one imported: {where.stdout}")
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


def main() -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):  # each mutant's line reaches a redirected log
        sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__)
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--suite", help="pytest arguments (default: each mutant's own suite)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    suite = args.suite.split() if args.suite else None
    suites = sorted({m.suite for m in chosen}) if suite is None else [" ".join(suite)]
    survivors = []
    with ThreadPoolExecutor(args.jobs) as pool:
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
