"""How a run's checks become findings (``radixkv_conformance.findings``): one check at a
time (``checking``), a violation raised as the ``Finding`` type of its id with the trace of
its run, or, where the id is acknowledged (``--known``), recorded and gone past."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from hypothesis.errors import HypothesisException, UnsatisfiedAssumption
from radixkv_spec.invariants import SpecViolation

from radixkv_conformance.findings import (
    Finding,
    Violation,
    describe,
    finding_id,
    finding_type,
    slug,
)
from radixkv_conformance.protocol import NotAdmitted
from radixkv_conformance.session import IllegalStep, RunEnded, Session, adapter_rejected, end_run
from radixkv_conformance.trace import Step, trace_document


class Verdicts:
    """The findings side of a run: mixed into the kit's steps (``steps.KitSteps``)."""

    session: ClassVar[Session]
    mode: ClassVar[str]
    trace: list[Step]
    acknowledged: list[tuple[int, str]]  # (step, id) of each known hit
    check: str  # the check now running: a finding's id starts with it
    page_size: int
    window: int | None

    @contextmanager
    def checking(self, check: str) -> Iterator[None]:
        """Run one check; a violation becomes the ``Finding`` type of its id."""
        outer, self.check = self.check, check
        try:
            yield
        except UnsatisfiedAssumption as error:
            if not isinstance(error, RunEnded):
                raise adapter_rejected(error) from error
            raise
        except (Finding, HypothesisException, IllegalStep):
            raise
        except NotAdmitted:
            self.session.stats["runs ended by the adapter: NotAdmitted"] += 1
            end_run()  # the engine would not take this step: nothing past it is judged
        except Exception as error:  # a violation, or the cache crashed: both are findings
            self.found(self.check, error)  # a check may name its sub-rule
        finally:
            self.check = outer

    def require(
        self, holds: object, message: str, rule: str | None = None, what: str | None = None
    ) -> None:
        """One check of the current step: a violation is a finding, unless acknowledged.

        ``rule`` tells apart checks of one step and one invariant that mean different
        things (a cached index freed vs an index leaked): each is its own finding id.

        An acknowledged (``--known``) violation is recorded and the step goes on: the model
        keeps the spec's state (it is never bent to the cache's), so the checks after it
        still compare the cache with the spec, and a consequence of the same bug shows as
        the same acknowledged id. Every other id is checked exactly as before.
        """
        if holds:
            return
        violation = Violation(message, rule, what)
        fid = finding_id(self.check, violation)
        if fid not in self.session.known:
            raise violation
        self.acknowledge(fid)

    def settled(self, bad_call: str) -> bool:
        """The search acknowledged that the cache accepts this bad call, so the rule stops
        drawing it: trying it again only ends runs (an accepted call that changed the cache
        cannot be modelled) and keeps the search from the deeper states where other bugs
        live. A crash the same call shows with other values is found in the same search as
        the acceptance, or not looked for again."""
        return f"INV-14:{slug('bad: ' + bad_call)}" in self.session.known

    def waive(self, violation: SpecViolation) -> bool:
        """The spec model's question on a rule it can go on after (a victim out of order):
        acknowledged (``--known``) violations are recorded and the step is applied, so the
        rest of the step (a locked victim, say) is still checked."""
        fid = finding_id(self.check, violation)
        if fid not in self.session.known:
            return False
        self.acknowledge(fid)
        return True

    def run_header(self) -> dict[str, Any]:
        """The trace header of this run (FORMAT.md)."""
        header: dict[str, Any] = {
            "implementation": self.session.name,
            "profile": self.session.profile.name,
            "mode": self.mode,
            "page_size": self.page_size,
        }
        if self.window is not None:
            header["sliding_window"] = self.window
        return header

    def acknowledge(self, fid: str) -> None:
        self.session.stats[f"acknowledged: {fid}"] += 1
        causes = self.session.causes
        first = causes is not None and all(known != fid for _, known in self.acknowledged)
        self.acknowledged.append((len(self.trace) - 1, fid))
        if causes is not None and first and causes.wants(fid, len(self.trace)):
            # a run to this hit, kept to tell whether its cause is the acknowledged one
            others = self.session.known - {fid}
            past = [(self.trace[at]["id"], known) for at, known in self.acknowledged[:-1]]
            check = self.check or "step"
            document = trace_document(self.run_header(), self.trace, others, check, "", fid, past)
            causes.note(fid, document)

    def found(self, check: str, error: BaseException) -> None:
        fid = finding_id(check, error)
        if fid in self.session.known:
            # Known, but raised by the cache or mid-step (not through ``require``): the step
            # cannot be finished, so this run ends here (discarded; replay stops).
            self.acknowledge(fid)
            self.session.stats["runs ended by an acknowledged crash"] += 1
            end_run()  # trace replay stops here, as passed up to this step
        message = describe(error)
        past = [(self.trace[at]["id"], known) for at, known in self.acknowledged]
        document = trace_document(
            self.run_header(), self.trace, self.session.known, check, message, fid, past
        )
        raise finding_type(fid)(message, check, document) from error
