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
"""

from __future__ import annotations

import re
from typing import Any

from radixkv_spec.invariants import SpecUsageError, SpecViolation

_TYPES: dict[str, type[Finding]] = {}


class Finding(AssertionError):
    """One conformance violation, with the trace of the run that showed it (FORMAT.md)."""

    finding_id: str = ""

    def __init__(self, message: str, check: str, trace: dict[str, Any]) -> None:
        super().__init__(f"[{self.finding_id}] {message}")
        self.message = message
        self.check = check
        self.trace = trace


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
