"""``run_conformance``: the whole kit as one function, for any prefix cache.

Like Hypothesis' ``run_conformance_test`` and zarr's testing package, the system under test
is an argument: a factory ``(page_size, host) -> adapter`` (``radixkv_conformance.protocol``)
and the profile of policies it runs under. From pytest::

    from radixkv_conformance import run_conformance
    from radixkv_conformance.profile import SGLANG

    def test_conformance() -> None:
        run_conformance(my_factory, profile=SGLANG).raise_for_failures()

The adapter's capabilities are checked up front, then every rule set it declares runs.
Every distinct finding is reported on its own, with its own shrunk trace: Hypothesis shrinks
distinct findings separately (each has its own exception type), ``minimize`` then deletes
every step the finding does not need by replaying the trace, and after a search the
findings it reported are acknowledged and the search goes on past them, until no new one
shows up or ``max_failures`` were collected. Findings in ``known`` are acknowledged from the
start: a run records each hit and goes on past it, so later, distinct findings are reached;
the report lists them and how often runs hit them.
"""

from __future__ import annotations

import sys
import time
import unittest
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import Phase, seed
from hypothesis import settings as Settings
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Unsatisfiable
from hypothesis.reporting import with_reporter
from hypothesis.stateful import get_state_machine_test

from radixkv_conformance.causes import Causes
from radixkv_conformance.coverage import Coverage
from radixkv_conformance.explore.bounds import Bounds
from radixkv_conformance.explore.driver import draws_independent_of_loaded_modules
from radixkv_conformance.explore.states import StatesReport, explore_states
from radixkv_conformance.findings import Failure, Finding, finding_lines, flatten
from radixkv_conformance.fuzz import machine_name
from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.minimize import minimize
from radixkv_conformance.profile import RADIXKV, Profile, policy_lines
from radixkv_conformance.protocol import (
    CAPABILITIES,
    AdapterError,
    AdapterFactory,
    require_capabilities,
)
from radixkv_conformance.registry import machine_for, probe_adapter

NOT_RULES = (
    "runs",
    "steps",
    "invariant checks",
    "evicted tokens",
    "evicted slots",
    "explored transitions",
)


class ConformanceError(AssertionError):
    """Raised by ``ConformanceReport.raise_for_failures``; its message is the report."""


@dataclass
class ConformanceReport:
    """What one conformance run checked, skipped, acknowledged and found."""

    name: str
    profile: Profile
    capabilities: frozenset[str] = frozenset()
    notes: str = ""
    known: tuple[str, ...] = ()
    seconds: float = 0.0
    stats: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    searches: int = 0  # Hypothesis searches run: the first draw, then one per seed
    budget_spent: bool = False  # the search stopped at its time budget
    explored: list[StatesReport] = field(default_factory=list)  # its breadth-first stages

    @property
    def complete(self) -> bool:
        """Every declared situation was reached (or accepted as unreached)."""
        return self.coverage.complete

    @property
    def verdict(self) -> str:
        if self.failures:
            return "FAILED"
        if not self.complete:
            return f"held; {len(self.coverage.missing)} situation(s) never reached"
        return "ok"

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def rules(self) -> dict[str, int]:
        """How often each rule or checked call ran."""
        return {
            what: n
            for what, n in sorted(self.stats.items())
            if what not in NOT_RULES and not what.startswith(("skipped: ", "acknowledged: "))
        }

    @property
    def skips(self) -> dict[str, int]:
        """Every skipped rule with its reason: undeclared capabilities, then run-time skips."""
        out = {
            f"{self.name} declares no {c!r} ({text})": 0
            for c, text in CAPABILITIES.items()
            if c not in self.capabilities
        }
        for what, n in self.stats.items():
            if what.startswith("skipped: "):
                out[what.removeprefix("skipped: ")] = n
        return out

    @property
    def acknowledged(self) -> dict[str, int]:
        """Each finding given as known, and how often runs hit it (and went on past it)."""
        return {fid: self.stats[f"acknowledged: {fid}"] for fid in self.known}

    def render(self) -> str:
        s = self.stats
        budget = ", stopped at its time budget" if self.budget_spent else ""
        lines = [
            f"{self.name} [{self.profile.name}]: {self.verdict} in {self.seconds:.1f}s — "
            f"runs {s['runs']}, steps {s['steps']}, invariant checks {s['invariant checks']}, "
            f"searches {self.searches}{budget}",
            f"    capabilities: {', '.join(sorted(self.capabilities)) or 'core only'}",
            f"    policies: {', '.join(policy_lines(self.profile, self.capabilities))}",
        ]
        if self.profile.notes:
            lines.append(f"    profile notes: {self.profile.notes}")
        if self.notes:
            lines.append(f"    adapter notes: {self.notes}")
        for stage in self.explored:
            lines.append(f"    explored breadth first: {stage.summary()}")
        lines += [f"    {what:<48} {n:>7}" for what, n in self.rules.items()]
        lines += self.coverage.lines()
        if self.coverage.missing:
            lines.append(f"    never reached: {', '.join(self.coverage.missing)}")
        if "alloc-refused" in self.coverage.missing and "capacity" not in self.capabilities:
            lines.append(
                "    refusals were not checked: a cache that allocates (allocation='cache') "
                "and declares no 'capacity' is never refused; declare it and raise NoRoom "
                "(docs/adapters.md), or accept it with --uncovered-ok alloc-refused"
            )
        if "swa" in self.capabilities and "node_boundaries" not in self.capabilities:
            lines.append(
                "    SWA locks judged as a range (a lock's last W tokens up to the path's first "
                "tombstone): the adapter reports no node boundaries (capability "
                "node_boundaries, docs/adapters.md)"
            )
        for reason, n in self.skips.items():
            lines.append(f"    skipped: {reason}" + (f" ({n}x)" if n else ""))
        for fid, n in self.acknowledged.items():
            lines.append(f"    acknowledged (--known): {fid} — hit {n}x, recorded, runs went on")
        for i, failure in enumerate(self.failures, 1):
            lines += finding_lines(failure, i, "report")
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        if self.failures:
            raise ConformanceError(self.render())


def run_conformance(
    factory: AdapterFactory,
    *,
    profile: Profile = RADIXKV,
    settings: Settings | None = None,
    name: str | None = None,
    max_failures: int = 32,
    known: Iterable[str] = (),
    progress: Callable[[Counter[str]], None] | None = None,
    budget: float | None = None,
    uncovered_ok: Iterable[str] = (),
    seed: int | None = None,
    on_failure: Callable[[Failure], None] | None = None,
    explore: Bounds | None = None,
    on_stage: Callable[[str], None] | None = None,
    jobs: int = 1,
    database: ExampleDatabase | None = None,
    known_traces: Iterable[tuple[str, dict[str, Any]]] = (),
) -> ConformanceReport:
    """Model-check the cache ``factory`` builds against the spec, under ``profile``.

    ``settings`` are Hypothesis settings (default: the loaded settings profile, see
    ``radixkv_conformance.search_settings``). Never raises for a finding (call
    ``raise_for_failures()`` on the report); raises ``AdapterError`` before any step when
    the adapter lacks what it claims. ``known`` finding ids are acknowledged: a hit is
    recorded and the run goes on past it (``ConformanceMachine.require``). ``progress``
    gets the running counts at the start of every run; ``on_failure`` each finding as soon
    as it is minimized; ``on_stage`` a line as each stage starts (an exploration stage, a
    search). ``jobs`` worker processes share the exploration (``explore/workers.py``).
    ``database`` is a Hypothesis example database a fuzz run filled (``fuzz.py``): the
    examples stored there for this cache are replayed first, each failure a finding.
    ``known_traces`` acknowledge findings by cause, (name, trace document) each: the run goes
    on past their ids, and a run that hits one of those ids by another cause (its trace cut
    to what it needs is not an acknowledged one, up to renaming: ``causes.py``) is a
    finding, "same symptom, another cause".

    The first search draws as the settings say (``seed``: from that seed instead). Until
    ``budget`` seconds are spent the search goes on with the next seed, every declared
    situation (``radixkv_spec.situations``) reached or not: a budget is the time the user
    gave. Those further searches favour runs that reach the least-visited situations and
    the least-run pairs of consecutive outcomes and the decisive situations
    (``radixkv_spec.cross``, ``ConformanceMachine.teardown``).
    Without a budget there is one search (and one more past each batch of findings).
    ``uncovered_ok`` names situations the report may leave unreached without calling the
    run incomplete.

    ``explore`` first explores every state within those bounds breadth first
    (``states.explore_states``) for a share of the budget (``EXPLORE_SHARE``, at least
    ``EXPLORE_FLOOR`` seconds of it; without a budget, ``EXPLORE_SECONDS``): its findings
    are shortest sequences, reported at once and acknowledged by the search after it, and
    the situations it reached count as reached.
    """
    name = name or getattr(factory, "__qualname__", None) or "cache"
    adapter = probe_adapter(factory, profile)
    capabilities = require_capabilities(adapter)
    notes = str(getattr(adapter, "notes", "") or "")
    causes = Causes()
    by_cause = {causes.acknowledge(document, label) for label, document in known_traces}
    acknowledged = set(known) | by_cause
    report = ConformanceReport(name, profile, capabilities, notes, tuple(sorted(acknowledged)))
    check = _Check(
        factory,
        profile,
        capabilities,
        report,
        acknowledged,
        causes=causes if by_cause else None,
        budget=budget,
        max_failures=max_failures,
        jobs=jobs,
        progress=progress,
        on_failure=on_failure,
        stage=on_stage or _silent,
    )
    session = check.machine("Machine").session
    report.coverage = Coverage(
        session.situations, accepted=frozenset(uncovered_ok), decisive=session.decisive
    )
    if database is not None:
        check.replay_stored(database, settings)
    if explore is not None:
        check.explore(explore)
    check.search(settings, seed)
    report.budget_spent = report.budget_spent or check.over_budget()
    report.seconds = time.perf_counter() - check.started
    return report


def _silent(_: str) -> None:
    """Where no one listens for the stages."""


@dataclass
class _Check:
    """One ``run_conformance`` under way: what it checks, the report it fills, the ids it
    acknowledges so far, and its stages (a database replayed, the exploration, the
    searches), each adding its findings to the report as soon as they are minimized."""

    factory: AdapterFactory
    profile: Profile
    capabilities: frozenset[str]
    report: ConformanceReport
    acknowledged: set[str]
    causes: Causes | None = None  # findings acknowledged by their trace (None: none are)
    budget: float | None = None
    max_failures: int = 32
    jobs: int = 1
    progress: Callable[[Counter[str]], None] | None = None
    on_failure: Callable[[Failure], None] | None = None
    stage: Callable[[str], None] = field(default=_silent)  # a line as each stage starts
    started: float = field(default_factory=time.perf_counter)

    def over_budget(self) -> bool:
        return self.budget is not None and time.perf_counter() - self.started >= self.budget

    def machine(self, kind: str) -> type[ConformanceMachine]:
        made = machine_for(
            machine_name(self.report.name, kind),
            self.factory,
            self.profile,
            capabilities=self.capabilities,
            known=frozenset(self.acknowledged),
            progress=self.progress,
        )
        made.session.causes = self.causes
        return made

    def add(self, failure: Failure) -> None:
        self.report.failures.append(failure)
        if self.on_failure is not None:
            self.on_failure(failure)

    def report_other_causes(self) -> None:
        """Runs that hit an id acknowledged by its trace, by another cause: findings."""
        if self.causes is None:
            return
        for trace in self.causes.others(self.factory, self.profile, self.acknowledged):
            said = trace["failure"]
            fid = said["finding"]
            message = f"same symptom as {self.causes.names[fid]}, another cause: {said['message']}"
            self.add(Failure(fid, said["check"], message, trace))

    def replay_stored(self, database: ExampleDatabase, settings: Settings | None) -> None:
        self.stage("replaying the examples a fuzz run stored in the database")
        stored = _replay_stored(self.machine("Machine"), database, settings)
        for finding in stored[: self.max_failures]:
            self.add(_minimized(finding, self.factory, self.profile))
            self.acknowledged.add(finding.finding_id)

    def explore(self, bounds: Bounds) -> None:
        seconds = EXPLORE_SECONDS
        if self.budget is not None:
            seconds = max(self.budget * EXPLORE_SHARE, min(self.budget, EXPLORE_FLOOR))
        report = self.report
        _explore(
            self.machine("Explored"),
            bounds,
            seconds,
            report,
            self.progress,
            self.on_failure,
            self.max_failures,
            self.stage,
            self.jobs,
        )
        self.acknowledged.update(failure.finding for failure in report.failures)
        self.report_other_causes()

    def search(self, settings: Settings | None, draw: int | None) -> None:
        """Search, then again from the next seed, steered, until the budget is spent (once
        without a budget); past each batch of new findings, again with the same draw."""
        report, examples = self.report, None
        while len(report.failures) < self.max_failures and not (
            report.searches and self.over_budget()
        ):
            searched = self.machine("Machine")
            searched.session.coverage = report.coverage.counts  # every search adds to one tally
            searched.session.steer = report.searches > 0
            self.stage(_search_stage(report, draw))
            search_started = time.perf_counter()
            findings = _search(searched, _sized(settings, examples), draw)
            runs = max(1, searched.session.stats["runs"])
            seconds_per_run = (time.perf_counter() - search_started) / runs
            report.searches += 1
            report.stats += searched.session.stats
            self.report_other_causes()
            new = [f for f in findings if f.finding_id not in self.acknowledged]
            if new:  # minimize them, then search on past them with the same draw
                if not self.add_new(new):
                    return
                continue
            if self.budget is None:
                return
            # the next seed, in the time that is left
            left = self.started + self.budget - time.perf_counter()
            examples = int(left / seconds_per_run)
            if examples < MIN_EXAMPLES:
                report.budget_spent = True
                return
            draw = 1 if draw is None else draw + 1

    def add_new(self, new: list[Finding]) -> bool:
        """Minimize and report new findings; False once the budget is spent doing it."""
        if self.progress is not None:  # a search with findings runs longer: say why
            print(
                f"{self.report.name}: minimizing {len(new)} new finding(s) by replay",
                file=sys.stderr,
            )
        for finding in new[: self.max_failures - len(self.report.failures)]:
            self.add(_minimized(finding, self.factory, self.profile))
            self.acknowledged.add(finding.finding_id)
            if self.over_budget():
                self.report.budget_spent = True
                return False
        return True


def _replay_stored(
    machine: type[ConformanceMachine], database: ExampleDatabase, settings: Settings | None
) -> list[Finding]:
    """The findings of the examples ``database`` holds for ``machine`` (Hypothesis' reuse
    phase alone: nothing new is drawn; a fuzz run stored them shrunk)."""
    base = settings if settings is not None else Settings()
    replay = Settings(base, database=database, derandomize=False, phases=[Phase.reuse])
    try:
        return _search(machine, replay)
    except unittest.SkipTest:  # Hypothesis' word for "nothing stored for this machine"
        return []


def _search_stage(report: ConformanceReport, draw: int | None) -> str:
    seed = "the settings' draw" if draw is None else f"seed {draw}"
    if not report.searches:
        return f"searching from {seed}"
    chase = "unreached situations" if not report.complete else "the least-visited situations"
    chase += ", decisive situations and outcome pairs"
    return f"search {report.searches + 1} from {seed}, steered to {chase}"


MIN_EXAMPLES = 10  # a further search shorter than this is not started
EXPLORE_SHARE = 0.25  # of the budget, for the breadth-first exploration before the search
EXPLORE_SECONDS = 30.0  # the exploration's time without a budget
EXPLORE_FLOOR = 10.0  # ... and at least this much of a small one (trees need four steps)


def _explore(
    machine: type[ConformanceMachine],
    bounds: Bounds,
    seconds: float,
    report: ConformanceReport,
    progress: Callable[[Counter[str]], None] | None,
    on_failure: Callable[[Failure], None] | None,
    max_failures: int,
    on_stage: Callable[[str], None],
    jobs: int,
) -> None:
    """Every state within ``bounds``, breadth first, for ``seconds`` shared by its stages
    (``Bounds.stages``), on ``jobs`` processes: each finding (a shortest sequence, handed
    over as found) goes into the report once; the situations reached count."""
    machine.session.coverage = report.coverage.counts

    def found(shortest: Failure) -> None:
        if any(failure.finding == shortest.finding for failure in report.failures):
            return  # an earlier stage found it, as short or shorter
        if len(report.failures) >= max_failures:
            return
        if not shortest.trace:  # the kit's machines trace every finding
            raise RuntimeError(f"{shortest.finding}: the exploration kept no trace")
        report.failures.append(shortest)
        if on_failure is not None:
            on_failure(report.failures[-1])

    def show(explored: StatesReport) -> None:
        if progress is not None:
            progress(Counter({"runs": explored.states, "steps": explored.transitions}))

    stages = bounds.stages()
    for at, stage in enumerate(stages, 1):
        on_stage(f"exploring breadth first, stage {at} of {len(stages)} ({stage.text()})")
        explored = explore_states(
            machine,
            stage,
            name=report.name,
            progress=show,
            budget=seconds / len(stages),
            on_finding=found,
            jobs=jobs,
        )
        report.explored.append(explored)
        report.stats["explored transitions"] += explored.transitions


def _sized(settings: Settings | None, examples: int | None) -> Settings | None:
    """``settings`` with at most ``examples`` runs (a search that must fit the budget)."""
    if examples is None:
        return settings
    base = settings if settings is not None else Settings()
    return Settings(base, max_examples=min(base.max_examples, examples))


def _minimized(finding: Finding, factory: AdapterFactory, profile: Profile) -> Failure:
    """The finding with its trace cut to the steps it needs (minimize.py)."""
    trace = minimize(finding.trace, factory, profile)
    failure = trace["failure"]
    return Failure(finding.finding_id, failure["check"], failure["message"], trace)


def _search(
    machine: type[ConformanceMachine], settings: Settings | None, draw: int | None = None
) -> list[Finding]:
    """One Hypothesis search (from the seed ``draw``, if given); every distinct finding it
    shrank, each with its trace."""
    base = settings if settings is not None else Settings()  # the loaded settings profile
    # Hypothesis' explain phase annotates its own printout, which the report replaces with
    # the traces; it costs more than the shrinking itself.
    phases = [phase for phase in base.phases if phase is not Phase.explain]
    settings = Settings(base, report_multiple_bugs=True, phases=phases)
    test = get_state_machine_test(machine, settings=settings)
    if draw is not None:
        test = seed(draw)(test)
    try:
        # the report renders the traces instead of Hypothesis' printout
        with with_reporter(lambda _: None), draws_independent_of_loaded_modules():
            test()
    except Unsatisfiable:  # every run hit an acknowledged finding: nothing new to find
        machine.session.stats["searches that found only acknowledged findings"] += 1
        return []
    except BaseException as error:  # sorted below: findings, or re-raised
        leaves = flatten(error)
        misuse = [leaf for leaf in leaves if isinstance(leaf, AdapterError)]
        if misuse:  # the adapter's, not the cache's: a usage error, not a finding
            raise misuse[0] from None
        findings = [leaf for leaf in leaves if isinstance(leaf, Finding)]
        if not findings:
            raise
        unique: dict[str, Finding] = {}
        for finding in findings:
            unique.setdefault(finding.finding_id, finding)
        return list(unique.values())
    return []
