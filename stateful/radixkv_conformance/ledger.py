"""The ownership ledger, and the one host the cache sees.

The kit plays the serving engine around the cache. Every KV index and state slot it hands
out is *given*; every free, by the cache through its host or by the caller as the profile
says, is checked against the ledger as it happens: never an index that was not given, never
one freed twice (INV-7; an index's SWA KV, INV-24; a state slot, INV-33). After each step the
rule sets compare the ledger with what the cache holds (every index has exactly one owner).

``OwnershipLedger`` is that bookkeeping, a part of every conformance machine; ``KitHost`` is
the engine as the adapter's factory sees it (``radixkv_conformance.protocol.Host``). Before
any run, the capability probe builds an adapter on a host whose ledger is ``IDLE``: nothing
is cached yet, so nothing is freed or judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from radixkv_spec.outcomes import FreeEvent

from radixkv_conformance.protocol import Indices


class HostLedger(Protocol):
    """What a host tells its ledger: the cache freed something, lent or copied a slot."""

    def cache_freed(self, kind: str, payload: tuple[int, ...]) -> None: ...

    def lend_slot(self) -> int | None: ...

    def state_copied(self, src: int, dst: int) -> None: ...


class KitHost:
    """The serving engine around the cache, as the adapter's factory sees it."""

    def __init__(self, page_size: int, window: int | None, ledger: HostLedger) -> None:
        self.page_size = page_size
        self.sliding_window = window
        self._ledger = ledger

    def __call__(self, indices: Indices) -> None:
        self.free(indices)

    def free(self, indices: Indices) -> None:
        self._ledger.cache_freed("free", tuple(int(i) for i in indices))

    def free_swa(self, indices: Indices) -> None:
        self._ledger.cache_freed("free_swa", tuple(int(i) for i in indices))

    def alloc_slot(self) -> int | None:
        return self._ledger.lend_slot()

    def free_slot(self, slot: int) -> None:
        self._ledger.cache_freed("slot", (int(slot),))

    def copy_state(self, src: int, dst: int) -> None:
        self._ledger.state_copied(int(src), int(dst))


class _Idle:
    """The ledger of the capability probe's host: it lends fresh slots and judges nothing
    (no step has run, so nothing the cache frees can be wrong yet)."""

    def __init__(self) -> None:
        self.slots = 0

    def cache_freed(self, kind: str, payload: tuple[int, ...]) -> None:
        """Nothing is cached yet, so nothing is freed."""

    def lend_slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def state_copied(self, src: int, dst: int) -> None:
        """As ``cache_freed``."""


def idle_host(page_size: int, window: int | None) -> KitHost:
    """A host for building an adapter outside any run (the up-front capability check)."""
    return KitHost(page_size, window, _Idle())


class OwnershipLedger:
    """Who holds each KV index and state slot in one run, and what the cache freed, in
    order. A part of the conformance machine: ``start_ledger`` at its setup, ``require``
    its checks (a violation is a finding of the step)."""

    events: list[FreeEvent]  # what the cache freed, in order
    copies: list[tuple[int, int]]  # the state copies the cache reported (src, dst)
    next_index: int  # the next fresh index; ``given`` is the ledger's truth
    next_slot: int
    given: set[int]  # every index handed out (allocated, or as a trace gives it)
    given_slots: set[int]
    freed: set[int]
    swa_freed: set[int]
    freed_slots: set[int]

    def require(
        self, holds: object, message: str, rule: str | None = None, what: str | None = None
    ) -> None:
        raise NotImplementedError  # the machine's: a failed check is a finding

    def start_ledger(self) -> None:
        """Nothing given, nothing freed."""
        self.events = []
        self.copies = []
        self.next_index = 0
        self.next_slot = 0
        self.given = set()
        self.given_slots = set()
        self.freed = set()
        self.swa_freed = set()
        self.freed_slots = set()

    def cache_freed(self, kind: str, payload: tuple[int, ...]) -> None:
        self.events.append((kind, payload))
        self.release(kind, payload, by="cache")

    def release(self, kind: str, indices: Sequence[int], by: str) -> None:
        """``by`` (the cache, or the caller) frees ``indices``: KV indices (``kind``
        ``"free"``), their SWA KV (``"free_swa"``) or state slots (``"slot"``)."""
        if kind == "slot":
            for slot in indices:
                self.require(
                    slot in self.given_slots,
                    f"INV-33: {by} freed slot {slot}, never given",
                    "never-given",
                )
                self.require(
                    slot not in self.freed_slots, f"INV-33: {by} freed slot {slot} twice", "twice"
                )
                self.freed_slots.add(slot)
            return
        for i in indices:
            self.require(
                i in self.given, f"INV-7: {by} freed {i}, which was never allocated", "never-given"
            )
            self.require(i not in self.freed, f"INV-7: {by} freed index {i} twice", "twice")
            if kind == "free_swa":
                self.require(i not in self.swa_freed, f"INV-24: {by} freed the SWA KV of {i} twice")
            else:
                self.freed.add(i)
            self.swa_freed.add(i)

    def allocate(self, n: int) -> tuple[int, ...]:
        out = tuple(range(self.next_index, self.next_index + n))
        self.hand_out(out)
        return out

    def hand_out(self, indices: Sequence[int]) -> None:
        """The caller holds ``indices`` now: freshly allocated, or as a replayed trace gives
        them. The ledger counts exactly these, so a trace with steps cut out (minimized)
        never shows the indices it no longer hands out as leaked."""
        self.given.update(indices)
        self.next_index = max(self.next_index, max(indices, default=-1) + 1)

    def new_slot(self) -> int:
        slot = self.next_slot
        self.hand_out_slot(slot)
        return slot

    def lend_slot(self) -> int | None:
        """A slot the pool lends the cache (``host.alloc_slot``); a mode whose pool can be
        full answers ``None`` (``MambaRules``)."""
        return self.new_slot()

    def hand_out_slot(self, slot: int) -> None:
        """As ``hand_out``, for a state slot."""
        self.given_slots.add(slot)
        self.next_slot = max(self.next_slot, slot + 1)

    def state_copied(self, src: int, dst: int) -> None:
        self.copies.append((src, dst))

    def frees_since(self, seen: int, kind: str = "free") -> list[int]:
        """The indices of ``kind`` the cache freed since it had freed ``seen`` groups."""
        return [i for k, group in self.events[seen:] if k == kind for i in group]
