"""Rules of per-sequence locks (profile ``lock_model="sets"``, capability ``unlock_checks``):
receipts handed back spent, or by another sequence, and a path locked again.

A receipt under per-sequence locks is the sequence's id: once its unlock went through, the
sequence holds nothing, and an unlock with that receipt must be rejected whoever else holds
the node (``ConformanceMachine.do_unlock_spent``); so must an unlock of a node with the
receipt of a sequence that does not hold it (``do_unlock_foreign``). While it holds a path,
the sequence may lock it again (capability ``relock``): that changes nothing, and its one
unlock frees the path (``ConformanceMachine.do_lock_again``).

Composed into a machine only for such an adapter (``registry.machine_for``): a counted
lock's token names no one, and a rule every machine carried would change every other
machine's random search.
"""

from __future__ import annotations

from typing import Any

from hypothesis.stateful import Bundle, consumes, multiple, precondition, rule

from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.session import LockRef


class ReceiptRules(ConformanceMachine):
    spent = Bundle("spent")  # receipts of locks released

    @rule(target=spent, held=consumes(ConformanceMachine.locks))
    def unlock_keeping_the_receipt(self, held: LockRef) -> Any:
        """An unlock whose caller keeps the receipt (to hand it back later, by mistake)."""
        released = self.do_unlock(held)
        return released if released is not None else multiple()

    @rule(receipt=spent)
    def unlock_with_a_spent_receipt(self, receipt: LockRef) -> None:
        self.do_unlock_spent(receipt)

    @rule(held=ConformanceMachine.locks, other=ConformanceMachine.locks)
    def unlock_with_another_receipt(self, held: LockRef, other: LockRef) -> None:
        """A node a sequence holds, unlocked with another sequence's receipt."""
        if not held.refused:
            self.do_unlock_foreign(held.node, other)

    @precondition(lambda self: self.has("relock"))
    @rule(held=ConformanceMachine.locks)
    def lock_again(self, held: LockRef) -> None:
        """The sequence that holds a path locks it again (a retried schedule step)."""
        self.do_lock_again(held)
