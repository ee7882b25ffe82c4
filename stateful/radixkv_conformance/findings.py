"""Findings: every distinct violation is its own exception type, with its own trace.

Hypothesis tells failures apart by where they were raised and by their exception type. The
machine raises every violation from one place, so each finding id gets its own subclass of
``Finding``: distinct findings are shrunk separately and reported together, and a finding
never hides another because they share a raise site.

One id means one thing, so acknowledging one (``--known ID``) never hides another:

- a rule of the spec or the kit: ``<INV-n>:<check>[-<rule>]``, e.g. ``INV-14:unmatched-unlock``
  or ``INV-11:evict-locked-victim`` beside ``INV-11:evict-victim-order`` (one invariant's
  rules that mean different things carry a ``rule``: ``Violation``, ``SpecViolation``);
- the engine raised something no rule expected (its own ``assert`` included):
  ``<exception type>:<check>@<module.function>``, keyed by where it was raised, e.g.
  ``AssertionError:evict@radix_trie.evict_blocks``;
- the adapter's own ``check()`` failed: ``<INV-n or exception type>:own-check-<message>``,
  keyed by its message (numbers left out), one id per distinct complaint.

A run that hits a known id records the hit and goes on past it
(``ConformanceMachine.require``); only a known crash, or a known violation the step cannot
finish after, ends the run.

What the search, the explorers and the report keep of each distinct finding is a
``Failure`` record, and ``finding_lines`` is the one place one is turned into text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from radixkv_spec.invariants import SpecUsageError, SpecViolation

if TYPE_CHECKING:  # only its type: the record holds the explorers' calls, and prints them
    from radixkv_conformance.explore.driver import RuleCall

_TYPES: dict[str, type[Finding]] = {}


class Finding(AssertionError):
    """One conformance violation, with the trace of the run that showed it (FORMAT.md)."""

    finding_id: str = ""

    def __init__(self, message: str, check: str, trace: dict[str, Any]) -> None:
        super().__init__(f"[{self.finding_id}] {message}")
        self.message = message
        self.check = check
        self.trace = trace


@dataclass(frozen=True)
class Failure:
    """One distinct finding, as the search, the explorers and the report keep it: its id
    (``finding``), the check that failed, its message and the FORMAT.md trace of a shortest
    run found (shrunk by the search, shortest by the explorers). An explorer also keeps the
    variant its run started from (``start``: page size, window ...) and its rule ``calls``.

    ``trace`` is empty where the machine kept none: an explored machine other than the
    kit's. It pickles: the explorers' worker processes send it back to their parent.
    """

    finding: str
    check: str
    message: str
    trace: dict[str, Any]
    start: tuple[tuple[str, Any], ...] = ()
    calls: tuple[RuleCall, ...] = ()

    @property
    def invariant(self) -> str | None:
        return invariant_id(self.message)

    def came_past(self) -> str:
        """The acknowledged findings its run hit first (often its causes), or ''."""
        hits = [
            f"{hit['finding']} at step {hit['step']}" for hit in self.trace.get("came_past", ())
        ]
        return f"came past acknowledged {', '.join(hits)}" if hits else ""

    def steps_text(self) -> list[str]:
        """The trace's step sequence, one line per step, after its page size (and window)."""
        window = self.trace.get("sliding_window")
        head = f"page_size={self.trace['page_size']}" + (f" window={window}" if window else "")
        lines = [head]
        for step in self.trace["steps"]:
            args = {k: v for k, v in step.items() if k not in ("id", "op", "expect", "observed")}
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            expect = f"  -> expect {step['expect']}" if "expect" in step else ""
            lines.append(f"#{step['id']} {step['op']}({shown}){expect}")
        return lines

    def calls_text(self) -> list[str]:
        """An explorer's sequence: the start variant, then one line per rule call."""
        start = ", ".join(f"{k}={v!r}" for k, v in self.start)
        return [f"start({start})"] + [call.text() for call in self.calls]


Printed = Literal["report", "explorer report", "found", "found shortest"]
"""Where a finding is printed (``finding_lines``):

- ``report``: a ``ConformanceReport`` lists it: check, runs it came past, its trace's steps;
- ``explorer report``: an explorer's report lists it: check, its shortest rule calls;
- ``found``: ``radixkv check`` says it, labelled, the moment it is minimized;
- ``found shortest``: ``radixkv check --states`` says it, labelled, the moment it is found.
"""


def finding_lines(failure: Failure, number: int, printed: Printed, label: str = "") -> list[str]:
    """Finding ``number`` as the lines printed where ``printed`` says: every finding the kit
    prints becomes text here. The places differ in small ways (a colon after the id or not,
    which steps) that their readers and tests rely on, so each keeps its own."""
    named = f"finding {number} [{failure.finding}]"
    past = failure.came_past()
    if printed == "report":
        head = f"  {named}: {failure.check}: {failure.message}"
        return [head, *_indented([f"({past})"] if past else []), *_indented(failure.steps_text())]
    if printed == "explorer report":
        head = f"  {named} {failure.check}: {failure.message}"
        return [head, *_indented(failure.calls_text())]
    if printed == "found shortest":
        steps = f"({len(failure.calls)} steps, shortest)"
        head = f"{label}: {named} {failure.check}: {failure.message} {steps}"
        return [head, *_indented(failure.calls_text())]
    # "found": the search's finding, with the acknowledged ones its run came past
    return [f"{label}: {named}: {failure.message}", *([f"  {past}"] if past else [])]


def _indented(lines: list[str]) -> list[str]:
    """``lines`` under a finding's head line, as every listing indents them."""
    return [f"      {line}" for line in lines]


class Violation(AssertionError):
    """A rule the kit itself checks (``ConformanceMachine.require``) did not hold.

    ``what`` overrides the id's head (by default the message's ``INV-n``): an adapter's own
    ``check()`` that names no invariant is keyed by its exception type instead.
    """

    def __init__(self, message: str, rule: str | None = None, what: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.what = what


RULE_ERRORS = (Violation, SpecViolation, SpecUsageError)
"""What the kit's and the spec's rules raise; anything else came from the engine."""


def invariant_id(message: str) -> str | None:
    """The first SPEC.md id (``INV-n``) in ``message``, if any."""
    found = re.search(r"\bINV-\d+\b", message)
    return found.group(0) if found else None


def slug(text: str) -> str:
    """``text`` as part of a finding id: lower case, each run of other characters than
    ASCII letters and digits one dash (``trace.file_label`` names files instead)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def finding_id(check: str, error: BaseException) -> str:
    """The stable id of ``error`` raised by ``check``: what broke, and where."""
    if not isinstance(error, RULE_ERRORS):  # the engine raised it: key it by where
        return f"{type(error).__name__}:{slug(check)}@{raised_at(error)}"
    what = getattr(error, "what", None) or invariant_id(describe(error)) or "INV-?"
    rule = getattr(error, "rule", None)
    return f"{what}:{slug(check)}" + (f"-{rule}" if rule else "")


def raised_at(error: BaseException) -> str:
    """``module.function`` of the innermost frame of ``error``'s traceback: the place an
    engine's exception came from (line numbers left out, so an id survives edits)."""
    tb = error.__traceback__
    if tb is None:
        return "unknown"
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", "?")).rsplit(".", 1)[-1]
    return f"{module}.{tb.tb_frame.f_code.co_name}"


def message_key(error: BaseException) -> str:
    """A key for an adapter's own ``check()`` failure: its message's first line, without
    the INV id (already in the finding id) and with numbers left out, so one complaint
    about different nodes is one finding and different complaints are different ones."""
    text = re.sub(r"\bINV-\d+\b:?", "", describe(error))
    return slug(re.sub(r"\d+", "n", text))[:60].strip("-") or "failed"


def describe(error: BaseException) -> str:
    """The first line of an error, for a report."""
    text = str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
    return text.splitlines()[0] if text.strip() else type(error).__name__


def finding_type(fid: str) -> type[Finding]:
    """The exception type of finding ``fid`` (one per id, so Hypothesis keeps them apart)."""
    if fid not in _TYPES:
        name = "Finding_" + re.sub(r"\W", "_", fid)
        _TYPES[fid] = type(name, (Finding,), {"finding_id": fid, "__module__": __name__})
    return _TYPES[fid]


def flatten(error: BaseException) -> list[BaseException]:
    """The leaves of an exception group (Hypothesis reports several bugs as one group)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in flatten(inner)]
    return [error]
