"""The ``radixkv`` command line: ``radixkv check`` runs the conformance kit.

    radixkv check                                  # radixkv's RadixCache, ChunkCache, RadixTrie
    radixkv check MODULE:FACTORY [--profile NAME]  # another implementation, under a profile
    radixkv check --replay TRACE.json [MODULE:FACTORY]
    radixkv check --exhaustive N [MODULE:FACTORY]  # every sequence up to N steps
    radixkv replay [--cache radixkv|sglang] [--requests N] [--page-size P] [--plot FILE]

``--profile`` names a semantic profile (radixkv, chunk, max, sglang; default: the module's
``SEMANTICS``, else radixkv). How long to search is the Hypothesis settings profile:
``--hypothesis-profile ci|dev|thorough`` (default ``HYPOTHESIS_PROFILE``, else ci) or
``--thorough``; for compatibility ``--profile ci|dev|thorough`` means the same.
Exit status 0 only when everything held.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SETTINGS_PROFILES = ("ci", "dev", "thorough")
OWN = (  # what ``radixkv check`` with no argument checks
    ("RadixCache", "radixkv_conformance.adapter:RadixCacheAdapter", "radixkv"),
    ("ChunkCache", "radixkv_conformance.adapters.chunk:factory", "chunk"),
    ("RadixTrie", "radixkv_conformance.adapters.max_trie:factory", "max"),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="radixkv", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="model-check a prefix cache against the spec")
    check.add_argument("target", nargs="?", help="MODULE:FACTORY (default: radixkv's caches)")
    check.add_argument("--profile", help="semantic profile (or a Hypothesis profile name)")
    check.add_argument("--hypothesis-profile", choices=SETTINGS_PROFILES, default=None)
    check.add_argument("--thorough", action="store_true", help="= --hypothesis-profile thorough")
    check.add_argument("--replay", type=Path, help="replay a JSON trace instead of searching")
    check.add_argument(
        "--exhaustive", type=int, metavar="N", help="run every sequence up to N steps instead"
    )
    check.add_argument(
        "--traces", type=Path, default=Path("conformance-traces"), help="where failures go"
    )
    check.add_argument(
        "--max-failures", type=int, default=8, help="distinct findings to collect (default 8)"
    )
    from radixkv import replay

    replay.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "replay":
        return replay.command(args)
    settings_profile = args.hypothesis_profile or ("thorough" if args.thorough else None)
    semantics_name = args.profile
    if semantics_name in SETTINGS_PROFILES:
        settings_profile, semantics_name = semantics_name, None
    if settings_profile is not None:
        os.environ["HYPOTHESIS_PROFILE"] = settings_profile
    os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")
    from radixkv_conformance.semantics import SEMANTICS

    if semantics_name is not None and semantics_name not in SEMANTICS:
        parser.error(f"unknown --profile {semantics_name!r}; known: {sorted(SEMANTICS)}")
    if args.replay is not None:
        return _replay(args.replay, args.target, semantics_name)
    if args.exhaustive is not None:
        from radixkv_conformance import exhaustive

        explored = exhaustive.own_targets()
        if args.target:
            factory, declared = _load(args.target)
            semantics = _semantics(semantics_name, declared)
            explored = [exhaustive.core_target(args.target, factory, semantics)]
        return exhaustive.command(explored, args.exhaustive, args.traces)
    targets: list[tuple[str, str, str | None]] = list(OWN)
    if args.target:
        targets = [(args.target, args.target, semantics_name)]
    return _check(targets, args.traces, args.max_failures)


def _load(target: str) -> tuple[Any, Any]:
    """The factory named ``MODULE:ATTR`` and its module's ``SEMANTICS`` (or None)."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise SystemExit(f"radixkv check: expected MODULE:FACTORY, got {target!r}")
    module = importlib.import_module(module_name)
    return getattr(module, attr), getattr(module, "SEMANTICS", None)


def _semantics(name: str | None, declared: Any) -> Any:
    from radixkv_conformance.semantics import RADIXKV, SEMANTICS

    if name is not None:
        return SEMANTICS[name]
    return declared if declared is not None else RADIXKV


def _check(targets: list[tuple[str, str, str | None]], traces: Path, max_failures: int) -> int:
    from radixkv_conformance import profiles
    from radixkv_conformance.conformance import run_conformance
    from radixkv_conformance.trace import write

    settings_name = profiles.load_profile()
    print(f"radixkv check: Hypothesis settings profile {settings_name!r}")
    failed: list[str] = []
    for label, target, semantics_name in targets:
        factory, declared = _load(target)
        semantics = _semantics(semantics_name, declared)
        report = run_conformance(
            factory,
            profile=semantics,
            name=label,
            max_failures=max_failures,
            progress=_progress_line(label),
        )
        print(file=sys.stderr)
        print("\n" + report.render())
        for i, failure in enumerate(report.failures, 1):
            path = traces / f"{_slug(label)}-{i}.json"
            write(failure.trace, path)
            print(f"  trace of failure {i}: {path}  (radixkv check --replay {path} {target})")
        if not report.passed:
            failed.append(label)
    if targets == list(OWN):
        failed += _check_capabilities()
    print("\nall invariants held" if not failed else f"\nFAILED: {', '.join(failed)}")
    return 1 if failed else 0


def _check_capabilities() -> list[str]:
    """radixkv's SWA and Mamba machines; returns the names of those that failed."""
    from radixkv_conformance.runner import capability_machines, render, run_machine

    failed = []
    for label, machine, stats in capability_machines():
        print(f"  {label}: running ...", file=sys.stderr, flush=True)
        report = run_machine(label, machine, stats)
        print("\n" + render(report))
        if not report.passed:
            failed.append(label)
    return failed


def _progress_line(label: str) -> Any:
    def show(stats: Counter[str]) -> None:
        print(
            f"\r  {label}: runs {stats['runs']:>5}  steps {stats['steps']:>7}"
            f"  invariant checks {stats['invariant checks']:>7}",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


def _replay(path: Path, target: str | None, semantics_name: str | None) -> int:
    from radixkv_conformance.trace import load, replay

    document = load(path)
    if target is None:
        target = "radixkv_conformance.adapter:RadixCacheAdapter"
        semantics_name = semantics_name or "radixkv"
    factory, declared = _load(target)
    semantics = _semantics(semantics_name or document["semantics"], None)
    if semantics_name is None and declared is not None:
        semantics = declared
    result = replay(document, factory, semantics)
    recorded = document.get("failure") or {}
    print(f"replayed {result.steps}/{len(document['steps'])} steps of {path} against {target}")
    if recorded:
        print(f"  recorded failure: {recorded.get('check')}: {recorded.get('message')}")
    if result.passed:
        print("  every check held")
        return 0
    print(f"  FAILED at {result.check}: {result.message}")
    return 1


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in label.lower()).strip("-")


if __name__ == "__main__":
    raise SystemExit(main())
