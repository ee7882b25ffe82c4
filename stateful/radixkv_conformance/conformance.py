"""``run_conformance``: the whole suite as one function, for any prefix cache.

Like Hypothesis' ``run_conformance_test`` and zarr's testing package, the system under test
is an argument: a factory ``(page_size, free_sink) -> PrefixCacheAdapter`` and the semantic
profile it claims. From pytest::

    from radixkv_conformance import run_conformance
    from radixkv_conformance.semantics import SGLANG

    def test_conformance() -> None:
        run_conformance(my_factory, profile=SGLANG).raise_for_failures()

A failure is shrunk by Hypothesis, then its check is switched off and the search goes on, so
one report lists every distinct finding (up to ``max_failures``), each with its minimal
trace (``radixkv_conformance.trace``, FORMAT.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings as Settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from radixkv_conformance.machines import BAD_CALLS, RadixCacheMachine, machine_for
from radixkv_conformance.protocol import AdapterFactory
from radixkv_conformance.semantics import CAPABILITIES, RADIXKV, Semantics
from radixkv_conformance.trace import invariant_id, trace_document

# Rule-level checks a re-run may switch off after they failed once.
RULE_CHECKS = frozenset(
    {f"bad: {kind}" for kind in BAD_CALLS}
    | {"unmatched unlock", "stale unlock", "lock of an evicted node"}
)
NOT_STEPS = ("runs", "steps", "invariant checks", "evicted tokens")


class ConformanceError(AssertionError):
    """Raised by ``ConformanceReport.raise_for_failures``; its message is the report."""


@dataclass
class Failure:
    """One distinct finding: the check that failed, its message and its shrunk trace."""

    check: str
    message: str
    trace: dict[str, Any]
    example: str = ""  # Hypothesis' own rendering of the shrunk example

    @property
    def invariant(self) -> str | None:
        return invariant_id(self.message)

    def steps_text(self) -> list[str]:
        """The shrunk step sequence, one line per step."""
        lines = [f"page_size={self.trace['page_size']}"]
        for step in self.trace["steps"]:
            args = {k: v for k, v in step.items() if k not in ("id", "op", "expect", "observed")}
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            expect = f"  -> expect {step['expect']}" if "expect" in step else ""
            lines.append(f"#{step['id']} {step['op']}({shown}){expect}")
        return lines


@dataclass
class ConformanceReport:
    """What one conformance run checked, skipped and found."""

    name: str
    semantics: Semantics
    seconds: float = 0.0
    stats: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def rules(self) -> dict[str, int]:
        """How often each rule or checked call ran."""
        return {
            what: n
            for what, n in sorted(self.stats.items())
            if what not in NOT_STEPS and not what.startswith("skipped: ")
        }

    @property
    def skips(self) -> dict[str, int]:
        """Every skipped rule with its reason: missing capabilities, then run-time skips."""
        out = {self.semantics.skip_reason(c): 0 for c in CAPABILITIES if not self.semantics.has(c)}
        for what, n in self.stats.items():
            if what.startswith("skipped: "):
                out[what.removeprefix("skipped: ")] = n
        return out

    def render(self) -> str:
        s, verdict = self.stats, "ok" if self.passed else "FAILED"
        lines = [
            f"{self.name} [{self.semantics.name}]: {verdict} in {self.seconds:.1f}s — "
            f"runs {s['runs']}, steps {s['steps']}, invariant checks {s['invariant checks']}"
        ]
        lines += [f"    {what:<48} {n:>7}" for what, n in self.rules.items()]
        for reason, n in self.skips.items():
            lines.append(f"    skipped: {reason}" + (f" ({n}x)" if n else ""))
        for i, failure in enumerate(self.failures, 1):
            lines.append(f"  failure {i}: {failure.check}: {failure.message}")
            lines += [f"      {line}" for line in failure.steps_text()]
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        if self.failures:
            raise ConformanceError(self.render())


def run_conformance(
    factory: AdapterFactory,
    *,
    profile: Semantics = RADIXKV,
    settings: Settings | None = None,
    name: str | None = None,
    max_failures: int = 4,
    progress: Callable[[Counter[str]], None] | None = None,
) -> ConformanceReport:
    """Model-check the cache ``factory`` builds against the spec, under semantic ``profile``.

    ``settings`` are Hypothesis settings (default: the loaded settings profile, see
    ``radixkv_conformance.profiles``). Never raises for a finding: call ``raise_for_failures()`` on
    the report. ``progress`` is called with the running counts at the start of every run.
    """
    name = name or getattr(factory, "__qualname__", None) or "cache"
    report = ConformanceReport(name, profile)
    disabled: set[str] = set()
    started = time.perf_counter()
    while len(report.failures) < max_failures:
        machine = machine_for(f"{_identifier(name)}Machine", factory, profile, frozenset(disabled))
        if progress is not None:
            machine.progress = lambda m=machine: progress(report.stats + m.stats)
        failure = _run_once(machine, name, settings)
        report.stats += machine.stats
        if failure is None:
            break
        report.failures.append(failure)
        if failure.check not in RULE_CHECKS or failure.check in disabled:
            break  # an invariant broke: later runs would keep finding the same state
        disabled.add(failure.check)
    report.seconds = time.perf_counter() - started
    return report


def _run_once(
    machine: type[RadixCacheMachine], name: str, settings: Settings | None
) -> Failure | None:
    printed: list[object] = []
    # One failure per run: the next run (with that check off) finds the next one.
    settings = Settings(settings or Settings.default, report_multiple_bugs=False)
    try:
        with with_reporter(printed.append):
            run_state_machine_as_test(machine, settings=settings)
    except Exception as error:  # the finding goes into the report, with its trace
        message = str(error) if isinstance(error, AssertionError) else repr(error)
        message = message.splitlines()[0] if message else type(error).__name__
        check = machine.last_check
        trace = trace_document(machine, name, check, message)
        return Failure(check, message, trace, "\n".join(map(str, printed)))
    return None


def _identifier(name: str) -> str:
    return "".join(ch for ch in name.title() if ch.isalnum()) or "Cache"
