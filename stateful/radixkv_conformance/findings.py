"""Findings: every distinct violation is its own exception type, with its own trace.

Hypothesis tells failures apart by where they were raised and by their exception type. The
machine raises every violation from one place, so each finding id gets its own subclass of
``Finding``: distinct findings are shrunk separately and reported together, and a finding
never hides another because they share a raise site.

A finding id is ``<INV-n or exception type>:<check>``, e.g. ``INV-14:unmatched-unlock`` or
``RuntimeError:unlock`` (the cache crashed during an unlock). ``--known ID`` acknowledges
one: a run that hits it records the hit and goes on past it (``ConformanceMachine.require``);
only a known crash, or a known violation the step cannot finish after, ends the run.
"""

from __future__ import annotations

import re
from typing import Any

from radixkv_spec.invariants import SpecUsageError

_TYPES: dict[str, type[Finding]] = {}


class Finding(AssertionError):
    """One conformance violation, with the trace of the run that showed it (FORMAT.md)."""

    finding_id: str = ""

    def __init__(self, message: str, check: str, trace: dict[str, Any]) -> None:
        super().__init__(f"[{self.finding_id}] {message}")
        self.message = message
        self.check = check
        self.trace = trace


def invariant_id(message: str) -> str | None:
    """The first SPEC.md id (``INV-n``) in ``message``, if any."""
    found = re.search(r"\bINV-\d+\b", message)
    return found.group(0) if found else None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def finding_id(check: str, error: BaseException) -> str:
    """The stable id of ``error`` raised by ``check``: what broke, and where."""
    message = describe(error)
    if isinstance(error, AssertionError | SpecUsageError):
        what = invariant_id(message) or "INV-?"
    else:  # the cache itself raised something unexpected
        what = type(error).__name__
    return f"{what}:{slug(check)}"


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
