"""One eviction of a ``MambaCacheModel``, replayed against it event by event.

``MambaCacheModel.apply_eviction`` hands the implementation's frees, in order, to an
``EvictionReplay``: each ``free`` deletes a run of pages ending at a leaf (the ``slot`` of
the state held there must follow it), each lone ``slot`` drops an inner node's state. Each
victim is checked as it comes (phase 1, KV tokens: an unlocked leaf the victim order
admits; phase 2, state slots: an unheld state it admits; a childless tombstone the INV-31
cascade must delete next), then where the eviction stopped. The replay changes the model
as it goes: ``apply_eviction`` restores it if a check raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv_spec.invariants import Waiver, holds, holds_or_waived
from radixkv_spec.outcomes import FreeEvent
from radixkv_spec.policies import LeafFacts
from radixkv_spec.tokens import Namespace, PagePath, Position

if TYPE_CHECKING:  # the model imports this module: a cycle at run time
    from radixkv_spec.mamba import MambaCacheModel, RecencyKey


class EvictionReplay:
    """One evict call replayed against the model, event by event."""

    def __init__(
        self, model: MambaCacheModel, num_tokens: int, mamba_slots: int, waive: Waiver
    ) -> None:
        self.m = model
        self.waive = waive
        self.num_tokens = num_tokens
        self.mamba_slots = mamba_slots
        self.tokens = 0
        self.slots = 0
        self.phase = 1 if num_tokens > 0 else 2
        self.cascade: Position | None = None  # a childless tombstone that must go next
        self.top: Position = (None, ())  # the position above the last deleted run
        self.deleted: tuple[Position, ...] = ()

    def run(self, events: list[FreeEvent]) -> None:
        while events:
            kind, payload = events.pop(0)
            if kind == "free":
                had_slot = self._delete(payload)
                if had_slot is not None:
                    follow = events.pop(0) if events else None
                    # INV-35: a deleted node frees its KV, then its slot
                    holds(
                        follow == ("slot", (had_slot,)),
                        "INV-35",
                        f"slot {had_slot} not freed",
                        "slot-not-freed",
                    )
                    self.slots += 1
                self._after_delete()
            else:
                self._tombstone(payload[0])
        holds(
            self.cascade is None,
            "INV-31",
            f"tombstone leaf {self.cascade!r} left behind",
            "tombstone-leaf",
        )
        self._phase_one_done()
        enough = self.slots >= self.mamba_slots or not self.m.mamba_candidates()
        message = f"freed {self.slots} < {self.mamba_slots} slots, states left"
        holds_or_waived(enough, "INV-35", message, "short-slots", self.waive)

    def _phase_one_done(self) -> None:
        if self.phase == 1:
            enough = self.tokens >= self.num_tokens or not self.m.full_candidates()
            message = f"freed {self.tokens} < {self.num_tokens}, leaves left"
            holds_or_waived(enough, "INV-35", message, "short", self.waive)
            self.phase = 2

    def _primary(self) -> list[Position]:
        """The candidates the next primary victim must be the least recent of."""
        if self.phase == 1 and (self.tokens >= self.num_tokens or not self.m.full_candidates()):
            self._phase_one_done()
        if self.phase == 1:
            return self.m.full_candidates()
        # INV-35: phase 2 stops at its slot target
        message = f"went on after {self.slots} slots"
        holds_or_waived(self.slots < self.mamba_slots, "INV-35", message, "past-target", self.waive)
        return self.m.mamba_candidates()

    def _require_lru(self, position: Position, candidates: list[Position]) -> None:
        holds(
            position in candidates,
            "INV-35",
            f"victim {position!r} is not a candidate",
            "not-candidate",
        )
        bounds = self._bounds(candidates)
        admitted = self.m.victims.admissible(bounds[position], list(bounds.values()))
        message = f"victim {position!r} is not {self.m.victims.name}"
        holds_or_waived(admitted, "INV-35", message, "victim-order", self.waive)

    def _bounds(self, candidates: list[Position]) -> dict[Position, LeafFacts]:
        """Each candidate's recency bounds, as ranks in one order. Ties in (tick, depth)
        share a rank: the LRU order is total up to them."""
        pairs = {pos: self._recency(pos) for pos in candidates}
        keys = sorted({key for pair in pairs.values() for key in pair})
        rank = {key: i for i, key in enumerate(keys)}
        return {pos: LeafFacts(rank[early], rank[late]) for pos, (early, late) in pairs.items()}

    def _recency(self, position: Position) -> tuple[RecencyKey, RecencyKey]:
        """Phase 1 reads a page's (tick, latest tick a split could give it); phase 2 the
        order states are evicted in."""
        if self.phase == 1:
            return self.m.key(position), self.m.latest_key(position)
        key = self.m.state_key(position)
        return key, key

    def _delete(self, group: tuple[int, ...]) -> int | None:
        """Apply one deleted node; return the slot it held (to be freed next)."""
        ns, run = self._run(group)
        leaf = run[-1]
        if self.cascade is not None:
            # INV-31: the cascade deletes the childless tombstone right after its child
            holds(
                (ns, leaf) == self.cascade,
                "INV-31",
                f"expected {self.cascade!r} next",
                "cascade-order",
            )
        else:
            self._require_lru((ns, leaf), self._primary())
        holds(not self.m.children(ns, leaf), "INV-35", f"victim {leaf!r} is not a leaf", "not-leaf")
        holds(
            not any(self.m.is_locked(ns, q) for q in run),
            "INV-35",
            f"{leaf!r} is locked",
            "locked-victim",
        )
        lone = all(len(self.m.children(ns, q)) == 1 for q in run[:-1])
        holds(lone, "INV-35", f"victim ending at {leaf!r} cuts off a branch", "cuts-branch")
        inner = any((ns, q) in self.m.states for q in run[:-1])
        holds(
            not inner, "INV-31", f"a state sits inside the victim ending at {leaf!r}", "inner-state"
        )
        for q in run:
            self.m._drop(ns, q)
        self.deleted += tuple((ns, q) for q in run)
        self.tokens += len(group)
        self.top = (ns, run[0][: -self.m.page_size])
        return self.m.states.pop((ns, leaf), None)

    def _after_delete(self) -> None:
        ns, parent = self.top
        childless = bool(parent) and not self.m.children(ns, parent)
        stateless = (ns, parent) not in self.m.states
        tombstone = childless and stateless and not self.m.tombstone_leaves
        self.cascade = (ns, parent) if tombstone else None

    def _tombstone(self, slot: int) -> None:
        # INV-35: a lone slot is an inner node's state, never in the middle of a cascade
        holds(
            self.cascade is None, "INV-35", f"slot {slot} freed before the cascade", "cascade-order"
        )
        owners = [pos for pos, s in self.m.states.items() if s == slot]
        holds(
            len(owners) == 1,
            "INV-33",
            f"freed slot {slot}, which the cache does not hold",
            "uncached",
        )
        ns, path = owners[0]
        self._require_lru((ns, path), self._primary())
        holds(
            bool(self.m.children(ns, path)),
            "INV-35",
            f"tombstoned leaf {path!r}",
            "tombstoned-leaf",
        )
        del self.m.states[(ns, path)]
        self.slots += 1

    def _run(self, group: tuple[int, ...]) -> tuple[Namespace, list[PagePath]]:
        """The positions a freed KV group held: whole pages along one path, in order."""
        p = self.m.page_size
        holds(
            len(group) > 0 and len(group) % p == 0,
            "INV-35",
            f"freed {len(group)} tokens",
            "partial-page",
        )
        owners = {
            index: (ns, path) for ns, path in self.m.positions() for index in self.m.pages[ns][path]
        }
        holds(
            all(i in owners for i in group),
            "INV-33",
            "freed a KV index the cache lacks",
            "uncached",
        )
        ns, leaf = owners[group[-1]]
        pages = len(group) // p
        holds(
            pages * p <= len(leaf), "INV-35", f"freed more pages than {leaf!r} has", "not-one-path"
        )
        run = [leaf[: len(leaf) - k * p] for k in reversed(range(pages))]
        held = tuple(i for q in run for i in self.m.pages[ns][q])
        holds(
            held == group,
            "INV-35",
            f"freed indices are not the path ending at {leaf!r}",
            "not-one-path",
        )
        return ns, run
