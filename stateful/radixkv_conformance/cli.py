"""The ``radixkv`` command line: ``radixkv check`` runs the conformance kit.

    radixkv check                                   # radixkv's own caches, every mode
    radixkv check MODULE:FACTORY [--profile P]      # another implementation
    radixkv check MODULE:FACTORY --known ID ...     # acknowledge findings, search on past them
    radixkv check MODULE:FACTORY --option K=V ...   # factory(page_size, host, K="V", ...)
    radixkv check --replay TRACE.json [MODULE:FACTORY] [--profile P] [--minimize OUT]
    radixkv check --exhaustive N [MODULE:FACTORY]   # every sequence up to N steps
    radixkv check --states BOUNDS [MODULE:FACTORY]  # every reachable state, breadth first
    radixkv drive [--cache radixkv|sglang] [--requests N] [--page-size P] [--plot FILE]

The profile of policies is, in order: ``--profile NAME`` (a built-in one) or ``--profile
MODULE:ATTR``; else the factory module's ``PROFILES[FACTORY]`` or ``PROFILE``; else, for a
replay, the profile the trace names; else radixkv's. The adapter's capabilities come from
the adapter itself. How long to search is the Hypothesis settings profile:
``--hypothesis-profile ci|dev|thorough`` (default ``HYPOTHESIS_PROFILE``, else ci) or
``--thorough``. ``MODULE`` is looked up from the current folder first, as ``python -m``
does, so an adapter next to you needs no ``PYTHONPATH``.

A search goes on, seed after seed, until every situation the cache's capabilities declare
was reached or ``--budget`` seconds per cache are spent (``radixkv_spec.situations``).

Exit status: 0 every invariant held and every declared situation was reached (or named by
``--uncovered-ok``); 1 a finding; 2 a usage error; 3 every invariant held but some declared
situation was never reached, so the pass is incomplete; 4 the adapter is broken: its module
does not import (a syntax error, a missing dependency) or its factory builds no adapter (a
wrong signature, an exception of its own). ``MODULE`` may also be the path of a ``.py``
file (``radixkv check ./my_adapter.py:factory``).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from radixkv_conformance.coverage import check_names
from radixkv_conformance.findings import Failure, finding_lines
from radixkv_conformance.protocol import AdapterBroken, AdapterError
from radixkv_conformance.targets import OWN, REPLAY_DEFAULT, load
from radixkv_conformance.trace import file_label, write

SETTINGS_PROFILES = ("ci", "dev", "thorough")
PASSED, FAILED, USAGE, INCOMPLETE, BROKEN_ADAPTER = 0, 1, 2, 3, 4  # exit statuses (module doc)
BUDGET = (
    120.0  # seconds per cache for a MODULE:FACTORY by default (README: "A minute with the kit")
)
OWN_BUDGET = 30.0  # ... and for each of radixkv's nine caches: ~2.5 minutes on 2 cores
JOBS_CAP = 8  # --jobs' default: the machine's cores, at most this many
OWN_NEEDS = ("torch", "radixkv")  # what checking radixkv's own caches imports


def main(argv: Sequence[str] | None = None) -> int:
    # torch's CPU wheel warns at import when numpy is absent; nothing here needs numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _command(parser, args)
    except AdapterBroken as broken:
        if getattr(args, "debug", False):
            raise
        said = f"the adapter is broken: {broken} (--debug shows where)"
        print(f"radixkv {args.command}: {said}", file=sys.stderr)
        return BROKEN_ADAPTER
    except USAGE_ERRORS as error:
        if getattr(args, "debug", False):
            raise
        parser.error(f"{_one_line(error)} (--debug shows where)")  # exits with status 2


USAGE_ERRORS = (LookupError, ImportError, OSError, ValueError, AdapterError)
"""What a command line can get wrong before any check runs: a target that does not import,
an adapter option it refuses, a trace that is not there or not JSON, an adapter that lacks
what it claims. A finding is never one of these: the kit turns what the cache raises into
findings."""


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    head = text[0] if text else ""
    if isinstance(error, ModuleNotFoundError):
        head += " (is the adapter's folder the current one, or on PYTHONPATH?)"
    return f"{type(error).__name__}: {head}" if not isinstance(error, LookupError) else head


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if os.getcwd() not in sys.path:  # an adapter in the current folder, as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    if args.command in ("drive", "replay"):
        from radixkv.driver import drive

        if args.command == "replay":  # one word, one meaning: a replay is a finding's trace
            print("radixkv replay is now radixkv drive", file=sys.stderr)

        return drive.command(args)
    settings_profile = args.hypothesis_profile or ("thorough" if args.thorough else None)
    profile_name = args.profile
    if profile_name in SETTINGS_PROFILES:  # one word, one meaning: a profile is an engine's
        parser.error(
            f"--profile names an engine's policies; {profile_name!r} is how long to search: "
            f"--hypothesis-profile {profile_name}"
        )
    if settings_profile is not None:
        os.environ["HYPOTHESIS_PROFILE"] = settings_profile
    os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")
    if importlib.util.find_spec("hypothesis") is None:  # the cache alone does not need it
        parser.error("`radixkv check` needs the kit: pip install ./kit (radixkv-kit)")
    _hypothesis_home_outside_the_folder()
    if not args.target and not all(map(importlib.util.find_spec, OWN_NEEDS)):
        parser.error(
            "with no MODULE:FACTORY, `radixkv check` checks radixkv's own caches, which need"
            " radixkv and torch (pip install ./kit '.[kit]'); name your adapter instead"
        )
    try:
        args.option = _options(args.option)
        args.uncovered_ok = sorted(check_names(args.uncovered_ok))
        args.known, args.known_traces = _known(args.known)
        if args.database is not None:  # refused before any cache is built, if it must be
            from radixkv_conformance.fuzz import open_database

            open_database(args.database)
        if args.replay is not None:
            return _replay(args.replay, args.target, profile_name, args)
        targets = _targets(args)
        if args.exhaustive is not None or args.states is not None:
            return _explore(args.target, profile_name, args)
        return _check(targets, profile_name, args)
    except KeyError as error:  # a LookupError, but its str() is the key's repr
        raise LookupError(f"unknown {error.args[0]!r}") from error


def _known(values: Sequence[str]) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """``--known`` values: finding ids, and traces (a ``.json`` path) acknowledged by cause
    (``causes.py``); a trace's id is also acknowledged, where a mode judges by id only (the
    exhaustive and state explorations, a replay)."""
    from radixkv_conformance.causes import finding_of
    from radixkv_conformance.trace import load as load_trace

    ids, traces = [], []
    for value in values:
        if not value.endswith(".json"):
            ids.append(value)
            continue
        document = load_trace(value)  # a missing or broken file: a usage error
        finding_of(document, value)  # one without a finding id, too
        traces.append((Path(value).name, document))
    return ids, traces


def _known_ids(args: Any) -> list[str]:
    """Every id ``--known`` names, a trace's included (for the modes that judge by id)."""
    return [*args.known, *(d["failure"]["finding"] for _, d in args.known_traces)]


def _hypothesis_home_outside_the_folder() -> None:
    """Hypothesis keeps a cache (``.hypothesis/``) in the current folder by default; the kit
    writes nothing there but the traces asked for, so its cache goes to the user's cache
    folder instead (``$XDG_CACHE_HOME/radixkv``, else ``~/.cache/radixkv``)."""
    from hypothesis.configuration import set_hypothesis_home_dir

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    set_hypothesis_home_dir(os.path.join(cache, "radixkv", "hypothesis"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radixkv", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="model-check a prefix cache against the spec")
    _what_to_check(check)
    _how_long(check)
    _instead_of_the_search(check)
    _the_verdict(check)
    try:
        from radixkv.driver import drive
    except ImportError:  # radixkv's caches need torch; the kit and `radixkv check` do not
        return parser

    drive.register_cache("sglang", drive.sglang_factory(_sglang_adapter))
    drive.add_parser(commands)
    return parser


def _what_to_check(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("what is checked")
    group.add_argument("target", nargs="?", help="MODULE:FACTORY (default: radixkv's caches)")
    group.add_argument("--profile", help="an engine's built-in profile, or MODULE:ATTR")
    group.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword for the factory, as a string: factory(page_size, host, KEY=VALUE)",
    )
    group.add_argument(
        "--known",
        action="append",
        default=[],
        metavar="ID|TRACE.json",
        help="acknowledge a finding (e.g. INV-14:unmatched-unlock): record hits, go on past "
        "it; a trace acknowledges its cause only: another cause of the same id is reported",
    )


def _how_long(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("how long and how wide")
    group.add_argument(
        "--budget",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help=f"seconds of exploration and search per cache (default {BUDGET:g} for a "
        f"MODULE:FACTORY, {OWN_BUDGET:g} for each of radixkv's caches)",
    )
    group.add_argument("--hypothesis-profile", choices=SETTINGS_PROFILES, default=None)
    group.add_argument("--thorough", action="store_true", help="= --hypothesis-profile thorough")
    group.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draw the first search from this seed (default: the settings profile's draw)",
    )
    group.add_argument(
        "--jobs",
        type=_positive_int,
        default=min(os.cpu_count() or 1, JOBS_CAP),
        metavar="N",
        help="check up to N caches at once, one process each (default: the machine's cores, "
        f"at most {JOBS_CAP}: %(default)s here); each cache's verdict is the same for every N",
    )
    group.add_argument(
        "--max-failures",
        type=_positive_int,
        default=32,
        help="distinct findings to collect (default 32)",
    )


def _instead_of_the_search(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("instead of the search, or before it")
    group.add_argument("--replay", type=Path, help="replay a JSON trace instead of searching")
    group.add_argument(
        "--minimize",
        type=Path,
        metavar="OUT",
        help="with --replay: write the trace cut to the steps its finding needs to OUT",
    )
    group.add_argument(
        "--exhaustive", type=int, metavar="N", help="run every sequence up to N steps instead"
    )
    group.add_argument(
        "--states",
        metavar="BOUNDS",
        help="explore every reachable state within BOUNDS (ci, large, or KEY=VALUE,...)",
    )
    group.add_argument(
        "--explore",
        default="tree",
        metavar="BOUNDS",
        help="before the search, every state within these bounds breadth first, for a quarter "
        "of the budget (default %(default)s: keys of two pages, two namespaces, one lock; "
        "BOUNDS as --states takes them; none: no exploration)",
    )
    group.add_argument(
        "--database",
        metavar="WHERE",
        help="first replay the examples a fuzz run stored here (a directory, or "
        "redis://HOST:PORT): radixkv_conformance.fuzz_test",
    )


def _the_verdict(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the verdict")
    group.add_argument(
        "--traces",
        type=Path,
        default=Path("conformance-traces"),
        help="where findings go (default: %(default)s)",
    )
    group.add_argument(
        "--incomplete-ok",
        action="store_true",
        help="exit 0, not 3, when every invariant held but situations were never reached "
        "(the report still lists them)",
    )
    group.add_argument(
        "--uncovered-ok",
        action="append",
        default=[],
        metavar="SITUATION",
        help="a declared situation the run may leave unreached and still pass",
    )
    group.add_argument("--debug", action="store_true", help="a usage error with its traceback")


def _sglang_adapter() -> Any:
    """The kit's sglang adapter (it loads sglang's bare tree): ``radixkv drive --cache sglang``."""
    return importlib.import_module("radixkv_conformance.adapters.sglang")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text}")
    return value


def seconds(text: str) -> float:
    """A number of seconds above zero (argparse's type for a budget or a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds above zero, got {text}")
    return value


def _options(pairs: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise LookupError(f"--option {pair!r}: expected KEY=VALUE, KEY a Python name")
        options[key] = value
    return options


def _named_profile(name: str) -> Any:
    """``--profile``: a built-in profile's name, or ``MODULE:ATTR``."""
    from radixkv_conformance.profile import PROFILES, Profile

    if ":" in name:
        module_name, _, attr = name.partition(":")
        profile = getattr(importlib.import_module(module_name), attr, None)
        if not isinstance(profile, Profile):
            raise LookupError(f"--profile {name}: not a radixkv_conformance Profile")
        return profile
    if name not in PROFILES:
        raise LookupError(f"unknown --profile {name!r}; known: {sorted(PROFILES)} or MODULE:ATTR")
    return PROFILES[name]


def _profile(name: str | None, declared: Any, fallback: Any = None) -> Any:
    from radixkv_conformance.profile import RADIXKV

    if name is not None:
        return _named_profile(name)
    return declared or fallback or RADIXKV


def _check(targets: list[tuple[str, str]], profile_name: str | None, args: Any) -> int:
    from radixkv_conformance import search_settings

    settings_name = search_settings.load_profile()
    if args.budget is None:
        args.budget = BUDGET if args.target else OWN_BUDGET
    jobs = min(args.jobs, len(targets))
    print(
        f"radixkv check: Hypothesis settings profile {settings_name!r}, "
        f"budget {args.budget:g}s per cache, {len(targets)} cache(s), {jobs} at a time",
        flush=True,
    )
    if jobs > 1:  # a process per cache; each explores in its own process
        outcomes = _in_workers(targets, profile_name, args, jobs)
    else:  # one cache (or --jobs 1): its exploration takes the --jobs workers
        outcomes = (_check_one(label, target, profile_name, args) for label, target in targets)
    failed: list[str] = []
    incomplete: list[str] = []
    for label, rendered, passed, complete in outcomes:
        print("\n" + rendered, flush=True)
        if not passed:
            failed.append(label)
        elif not complete:
            incomplete.append(label)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return FAILED
    if incomplete:
        print(f"\nheld, incomplete (situations never reached): {', '.join(incomplete)}")
        return PASSED if args.incomplete_ok else INCOMPLETE
    print("\nall invariants held, every declared situation reached")
    return PASSED


def _targets(args: Any) -> list[tuple[str, str]]:
    """(label, target) of each cache to check; a file's path is labelled by its module's
    name, as a fuzz test names it (``fuzz.cache_name``)."""
    if not args.target:
        return list(OWN)
    module, _, attr = args.target.rpartition(":")
    label = f"{Path(module).stem}:{attr}" if module.endswith(".py") else args.target
    return [(label, args.target)]


Outcome = tuple[str, str, bool, bool]
"""One cache's check: its label, its rendered report, whether it passed and was complete."""


def _check_one(label: str, target: str, profile_name: str | None, args: Any) -> Outcome:
    """One cache's exploration and search; findings are printed as they are found."""
    from radixkv_conformance.conformance import run_conformance
    from radixkv_conformance.explore.bounds import parse_bounds
    from radixkv_conformance.fuzz import open_database
    from radixkv_conformance.progress import Progress, Stages

    factory, declared = load(target, args.option)
    profile = _profile(profile_name, declared)
    show = functools.partial(_show_finding, label, target, args.traces, [])
    explore = None if args.explore == "none" else parse_bounds(args.explore)
    with Progress(label) as progress:
        report = run_conformance(
            factory,
            profile=profile,
            name=label,
            max_failures=args.max_failures,
            known=args.known,
            known_traces=args.known_traces,
            progress=progress.update,
            budget=args.budget,
            uncovered_ok=args.uncovered_ok,
            seed=args.seed,
            on_failure=show,
            explore=explore,
            on_stage=Stages(label, args.budget, progress),
            database=open_database(args.database),
            jobs=args.jobs if len(_targets(args)) == 1 else 1,
        )
    return label, report.render(), report.passed, report.complete


def _in_workers(
    targets: list[tuple[str, str]], profile_name: str | None, args: Any, jobs: int
) -> Iterator[Outcome]:
    """Each cache in a process of its own, ``jobs`` at a time; the reports come back in
    the order of ``targets`` (a cache's run does not depend on which process ran it)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # no fork of a process torch has threaded
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_started) as pool:
        futures = [
            pool.submit(_check_one, label, target, profile_name, args) for label, target in targets
        ]
        for future in futures:
            yield future.result()


def _worker_started() -> None:
    """A worker sees what the command line set up in its parent: the folder's adapters,
    the quiet torch import, Hypothesis' cache outside the folder (its environment is
    inherited, ``HYPOTHESIS_PROFILE`` with it)."""
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    _hypothesis_home_outside_the_folder()


def _show_finding(
    label: str, target: str, traces: Path, found: list[Failure], failure: Failure
) -> None:
    """Each finding as soon as it is minimized, with its trace."""
    found.append(failure)
    path = traces / f"{file_label(label)}-{len(found)}.json"
    write(failure.trace, path)
    print("\n".join(finding_lines(failure, len(found), "found", label)))
    print(f"  trace: {path}  (radixkv check --replay {path} {target})", flush=True)


def _explore(target: str | None, profile_name: str | None, args: Any) -> int:
    """``--exhaustive N`` or ``--states BOUNDS``: radixkv's caches, or the one named."""
    from radixkv_conformance.explore import sequences, states

    known = _known_ids(args)
    explored = sequences.own_targets(known)
    if target is not None:
        factory, declared = load(target, args.option)
        profile = _profile(profile_name, declared)
        explored = [sequences.target(target, factory, profile, known)]
    if args.exhaustive is not None:
        return sequences.command(explored, args.exhaustive, args.traces, args.jobs)
    budget = args.budget if args.budget is not None else BUDGET
    return states.command(explored, args.states, args.traces, target is None, budget, args.jobs)


def _replay(path: Path, target: str | None, profile_name: str | None, args: Any) -> int:
    from radixkv_conformance.minimize import minimize
    from radixkv_conformance.profile import PROFILES
    from radixkv_conformance.replay import replay
    from radixkv_conformance.session import IllegalStep
    from radixkv_conformance.trace import load as load_trace

    known = _known_ids(args)
    out = args.minimize
    document = load_trace(path)
    target = target or REPLAY_DEFAULT[document.get("mode", "plain")]
    factory, declared = load(target, args.option)
    profile = _profile(profile_name, declared, PROFILES.get(document["profile"]))
    try:
        result = replay(document, factory, profile, known or None)  # default: the trace's
    except IllegalStep as illegal:
        raise LookupError(f"{path}: {illegal}") from None  # a usage error: exit 2
    recorded = document.get("failure") or {}
    print(f"replayed {result.steps}/{len(document['steps'])} steps of {path} against {target}")
    print(f"  profile: {profile.name}")
    if recorded:
        print(f"  recorded finding: {recorded.get('check')}: {recorded.get('message')}")
    for fid in sorted(set(result.acknowledged)):
        hits = result.acknowledged.count(fid)
        print(f"  acknowledged (--known): {fid} — hit {hits}x, replay went on")
    if result.passed:
        print("  every check held" + (" but the acknowledged ones" if result.acknowledged else ""))
        return 0
    print(f"  FAILED [{result.finding}] at {result.check}: {result.message}")
    if out is not None:
        small = minimize(document, factory, profile, known or None)
        write(small, out)
        print(f"  minimized: {len(small['steps'])} of {len(document['steps'])} steps in {out}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
