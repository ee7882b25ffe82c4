"""The ``radixkv`` command line: ``radixkv check`` runs the conformance machines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radixkv", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="model-check radixkv's own caches against the spec")
    check.add_argument(
        "--profile",
        choices=["ci", "dev", "thorough"],
        default=None,
        help="Hypothesis profile (default: HYPOTHESIS_PROFILE, else ci)",
    )
    args = parser.parse_args(argv)
    return _check(args.profile)


def _check(profile: str | None) -> int:
    import os

    if profile is not None:
        os.environ["HYPOTHESIS_PROFILE"] = profile
    os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")
    from stateful import profiles
    from stateful.adapter import RadixCacheAdapter
    from stateful.machines import machine_for
    from stateful.runner import run_machine

    name = profiles.load_profile()
    print(f"radixkv check: profile {name!r}")
    reports = [
        run_machine("RadixCache", machine_for("RadixCacheMachine", RadixCacheAdapter)),
    ]
    for report in reports:
        _print_report(report)
    failed = [r.name for r in reports if not r.passed]
    print("all invariants held" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def _print_report(report: object) -> None:
    from stateful.runner import MachineReport

    assert isinstance(report, MachineReport)
    stats = report.stats
    verdict = "ok" if report.passed else "FAILED"
    steps = sum(
        n for what, n in stats.items() if what not in ("invariant checks", "evicted tokens")
    )
    print(f"\n{report.name}: {verdict} in {report.seconds:.1f}s")
    print(f"  runs {stats['runs']}, steps {steps}, invariant checks {stats['invariant checks']}")
    for what, n in sorted(stats.items()):
        print(f"    {what:<32} {n:>8}")
    if report.failure:
        print(report.failure, file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
