"""The meaning of RadixCache with a sliding window of W tokens, page by page.

Like ``radixkv_spec.model`` it holds no tree: the page map of ``radixkv_spec.pages`` (page
positions ``(ns, path)`` to KV indices, one ``PageTable`` per namespace, walked by its
functions), a set of *tombstoned* positions (full KV kept, sliding-window KV freed), lock
handles and recency. An eviction is not predicted but checked: the implementation reports
what it freed (``free``: a whole node; ``free_swa``: a node tombstoned) and the model
accepts it only if it was admissible.
"""

import itertools
from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from radixkv_spec.invariants import SpecViolation, Waiver, holds, holds_or_waived, never, require
from radixkv_spec.outcomes import (
    EvictionOutcome,
    FreeEvent,
    InsertOutcome,
    MatchOutcome,
    ResetOutcome,
)
from radixkv_spec.pages import (
    PageMap,
    cached_len,
    page_prefixes,
    path_indices,
)
from radixkv_spec.policies import LRU_LEAVES, PLAIN_MODEL_ONLY, LeafFacts, VictimOrder
from radixkv_spec.swa_window import WindowTombstones, exact_window, handle_window, window_holds
from radixkv_spec.tokens import Namespace, PagePath, Position, Token, aligned

DeadInsert: TypeAlias = Literal["dropped", "tombstoned"]


@dataclass
class _Tally:
    """What one eviction has freed so far, and the tombstone leaves it found (an insert
    that caches tombstones may leave one: that is not the eviction's doing)."""

    full_evicted: int = 0
    swa_evicted: int = 0
    deleted: list[Position] = field(default_factory=list)
    tombstone_leaves_before: set[Position] = field(default_factory=set)


class SlidingWindowModel(PageMap):
    """Pages, tombstones, lock handles and recency of a RadixCache with a window."""

    def __init__(
        self,
        page_size: int,
        window: int,
        victims: VictimOrder = LRU_LEAVES,
        dead_insert: DeadInsert = "dropped",
        tombstone_locks: bool = False,
        window_tombstones: WindowTombstones = "stop",
    ) -> None:
        """``dead_insert``: what an insert does with new pages that all lie before
        ``swa_evicted`` (no SWA KV left for any of them): ``"dropped"`` (not cached, the
        cache frees their indices) or ``"tombstoned"`` (cached as tombstones, sglang).
        ``tombstone_locks``: a lock may end at a tombstone (sglang); it holds the full KV
        of its path and, unless ``window_tombstones`` walks on past a tombstone, no SWA
        window (none is left at its end). ``window_tombstones``: what a lock's window does
        at a tombstone (``WindowTombstones``)."""
        # The SWA model knows recency only (no hits, births or priorities) and widens no
        # insert's recency
        require(victims not in PLAIN_MODEL_ONLY, f"the SWA model cannot judge {victims.name}")
        self.page_size = page_size
        self.window = window
        self.victims = victims
        self.dead_insert = dead_insert
        self.tombstone_locks = tombstone_locks
        self.window_tombstones: WindowTombstones = window_tombstones
        self.pages: dict[Namespace, dict[PagePath, tuple[int, ...]]] = {}
        self.tombstones: set[Position] = set()
        self.handles: Counter[Position] = Counter()
        self.recency: dict[Position, int] = {}
        self.latest: dict[Position, int] = {}  # the latest tick a split could have given
        self.clock = 0

    def __repr__(self) -> str:
        return (
            f"SlidingWindowModel(page_size={self.page_size}, window={self.window}, "
            f"pages={self.pages!r}, tombstones={self.tombstones!r})"
        )

    # ---- queries -------------------------------------------------------------------------

    def path_pages(self, ns: Namespace, key: PagePath) -> list[Position]:
        """The cached page positions along the aligned ``key``, from the root, as far as
        cached."""
        end = cached_len(self.table(ns), key, self.page_size)
        return [(ns, q) for q in page_prefixes(key[:end], self.page_size)]

    def minimum_windows(self) -> set[Position]:
        """Pages every lock must keep SWA KV for: the last W live tokens above each handle
        (up to a tombstone, or past it as ``window_tombstones`` says)."""
        return self._windows(self.window)

    def maximum_windows(self) -> set[Position]:
        """Pages a lock may keep SWA KV for: the live pages above each handle up to the first
        tombstone (a cache locks whole nodes, so past W, but never through a tombstone),
        or every live page above it where the window walks on past tombstones."""
        return self._windows(None)

    def exact_window(
        self, ns: Namespace, path: Sequence[Token], node_starts: Sequence[int]
    ) -> frozenset[Position]:
        """The pages a lock taken now at ``(ns, path)`` SWA-locks, the cache's nodes along
        ``path`` beginning at ``node_starts`` (``exact_window``, this model's tombstones)."""
        return exact_window(
            ns,
            tuple(path),
            node_starts,
            self.tombstones,
            self.page_size,
            self.window,
            self.window_tombstones,
        )

    def _windows(self, window: int | None) -> set[Position]:
        kept: set[Position] = set()
        for ns, path in self.handles:
            kept |= handle_window(
                ns, path, self.tombstones, self.page_size, window, self.window_tombstones
            )
        return kept

    def total_size(self) -> int:
        return sum(map(len, self.pages.values())) * self.page_size

    def live_size(self) -> int:
        return self.total_size() - len(self.tombstones) * self.page_size

    def protected_size(self) -> int:
        return sum(self.is_locked(*q) for q in self.positions()) * self.page_size

    # ---- operations ----------------------------------------------------------------------

    def match(
        self,
        ns: Namespace,
        tokens: Sequence[Token],
        /,
        *,
        room: Sequence[FreeEvent] | None = None,
        waive: Waiver = never,
    ) -> MatchOutcome:
        """The indices of the longest cached prefix that satisfies the window (INV-23).

        ``room`` and ``waive`` are Mamba's (a copy of a state): ignored."""
        key = aligned(tokens, self.page_size)
        path = self.path_pages(ns, key)
        flags = [q in self.tombstones for q in path]
        best = max(
            (
                k
                for k in range(len(path) + 1)
                if window_holds(flags[:k], self.page_size, self.window)
            ),
        )
        self._touch(path[:best], self._split_remainder(path[:best]))
        return MatchOutcome.of(
            path_indices(self.table(ns), key[: best * self.page_size], self.page_size)
        )

    def insert(
        self,
        ns: Namespace,
        tokens: Sequence[Token],
        indices: Sequence[int],
        /,
        *,
        priority: int = 0,
        prev_prefix_len: int = 0,
        swa_evicted_seqlen: int = 0,
        state_slot: int | None = None,
    ) -> InsertOutcome:
        """Cache ``tokens``; ``dropped``: the indices the cache frees.

        The cache owns ``indices[prev_prefix_len:]`` of the aligned key: each index is
        adopted or freed. A cached tombstone is revived with the caller's indices only if the
        caller still holds their SWA KV and no handle runs through it (INV-24). ``priority``
        (the plain model's) and ``state_slot`` (Mamba's) are ignored.
        """
        p = self.page_size
        key = aligned(tokens, p)
        require(len(indices) >= len(key), f"{len(indices)} indices for {len(key)} tokens")
        cached = self.path_pages(ns, key)
        remainder = self._split_remainder(cached)  # before the new pages branch off there
        matched, freed = len(cached) * p, list[int]()
        for position in cached:
            start = len(position[1]) - p
            if start < prev_prefix_len:
                continue
            incoming = tuple(indices[start : start + p])
            revive = position in self.tombstones and swa_evicted_seqlen <= start
            if revive and not self.is_locked(*position):
                freed.extend(self.pages[ns][position[1]])
                self.pages[ns][position[1]] = incoming
                self.tombstones.discard(position)
            else:
                freed.extend(incoming)
        live_from = min(max(matched, swa_evicted_seqlen), len(key))
        dropped = live_from == len(key) and self.dead_insert == "dropped"
        end = matched if dropped else len(key)
        if end == matched:
            freed.extend(indices[matched : len(key)])
        else:
            for path in page_prefixes(key, p)[len(cached) :]:
                start = len(path) - p
                self.pages.setdefault(ns, {})[path] = tuple(indices[start : start + p])
                if start < live_from:
                    self.tombstones.add((ns, path))
        self._touch(self.path_pages(ns, key[:end]), remainder)
        return InsertOutcome(matched, tuple(freed), end)

    def lock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Take a handle at ``prefix`` (the empty path: nothing); tombstones are refused
        unless the model takes ``tombstone_locks``. ``obtained_at`` is ignored: the model
        keeps no birth ticks to tell a stale handle by."""
        position = (ns, tuple(prefix))
        if not position[1]:
            return
        require(self.has_page(*position), f"{position!r} is not cached")
        tombstone = position in self.tombstones
        require(not tombstone or self.tombstone_locks, f"{position!r} is a tombstone")
        self.handles[position] += 1

    def unlock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Give back one handle held at exactly ``prefix`` (the empty path: nothing);
        ``obtained_at`` is ignored, as by ``lock``."""
        position = (ns, tuple(prefix))
        if not position[1]:
            return
        require(self.handles[position] > 0, f"no handle is held at {position!r}")
        self.handles[position] -= 1
        if not self.handles[position]:
            del self.handles[position]

    def reset(self) -> ResetOutcome:
        """Drop everything: the indices freed, and of those the ones whose SWA KV was live."""
        full = [i for ns, path in self.positions() for i in self.pages[ns][path]]
        live = [
            i
            for ns, path in self.positions()
            if (ns, path) not in self.tombstones
            for i in self.pages[ns][path]
        ]
        self.pages.clear()
        self.tombstones.clear()
        self.handles.clear()
        self.recency.clear()
        self.latest.clear()
        return ResetOutcome(tuple(full), swa_live=tuple(live))

    def check(self) -> None:
        """Assert the model's own invariants (raises ``SpecViolation``)."""
        p = self.page_size
        positions = set(self.positions())
        for ns, path in self.positions():
            indices = self.pages[ns][path]
            # INV-2: a position is a whole, non-empty page with one index per token
            holds(len(path) > 0 and len(path) % p == 0, "INV-2", f"{path!r} is not page-aligned")
            holds(len(indices) == p, "INV-2", f"{path!r} does not hold {p} indices")
            # INV-3: the cached set is prefix-closed: no page hangs below a missing one
            holds(self.has_page(ns, path[:-p]), "INV-3", f"{path!r} has no parent")
        cached = [i for table in self.pages.values() for indices in table.values() for i in indices]
        # INV-7: no index is held twice
        holds(len(set(cached)) == len(cached), "INV-7", "an index is held twice")
        holds(self.tombstones <= positions, "INV-20", "a tombstone off the page map")
        # INV-8: every cached position has a time, and a latest one no earlier
        holds(set(self.recency) == positions == set(self.latest), "INV-8", "recency")
        holds(all(self.latest[q] >= t for q, t in self.recency.items()), "INV-8", "latest")
        for position, count in self.handles.items():
            # INV-5: handles are positive counts at cached positions (live, unless the
            # cache takes locks that end at a tombstone)
            live = position not in self.tombstones or self.tombstone_locks
            holds(count > 0 and position in positions and live, "INV-5", f"bad {position!r}")

    def _touch(self, path: Sequence[Position], remainder: Sequence[Position]) -> None:
        """Stamp ``path``; the pages a split at its end could put in the lower half (the
        ``remainder``) get the stamp as their latest possible one."""
        self.clock += 1
        for position in path:
            self.recency[position] = self.latest[position] = self.clock
        for position in remainder:
            self.latest[position] = self.clock

    def _split_remainder(self, path: Sequence[Position]) -> list[Position]:
        """Under a victim order whose splits refresh the lower half too: the single-child
        chain below ``path`` (a node never spans a branch point), as the plain model widens
        it (``radixkv_spec.model``); else nothing."""
        chain: list[Position] = []
        if not (self.victims.refreshes_split_remainder and path):
            return chain
        ns, end = path[-1]
        below = self.children(ns, end)
        while len(below) == 1:
            chain.append((ns, below[0]))
            below = self.children(ns, below[0])
        return chain

    # ---- eviction ------------------------------------------------------------------------

    def apply_eviction(
        self,
        num_tokens: int,
        events: Sequence[FreeEvent],
        /,
        *,
        waive: Waiver = never,
        swa_num_tokens: int = 0,
        swa_locked: AbstractSet[Position] | None = None,
        mamba_slots: int = 0,
    ) -> EvictionOutcome:
        """Check an implementation's ``evict(num_tokens, swa_num_tokens)`` (its ``free`` and
        ``free_swa`` events, in order) and apply it.

        ``swa_locked`` are the positions the implementation held SWA-locked before the call
        (node-granular, so at least ``minimum_windows()``, which is what ``None`` means).
        Each victim is checked as it goes, then where the eviction stopped, every rule on
        its own. Raises SpecViolation (INV-11, INV-20, INV-24) unless every step was
        admissible and the counts stop right, except for what ``waive`` acknowledges of the
        rules the model can go on after (the victim order, where the eviction stopped).
        ``mamba_slots`` (Mamba's) is ignored.
        """
        locked = self.minimum_windows() if swa_locked is None else swa_locked
        tally = self._apply_frees(num_tokens, swa_num_tokens, events, locked, waive)
        for violation in self._end_violations(num_tokens, swa_num_tokens, tally, locked):
            if not waive(violation):
                raise violation
        return EvictionOutcome(tally.full_evicted, tally.swa_evicted, deleted=tuple(tally.deleted))

    def _apply_frees(
        self,
        num_tokens: int,
        swa_num_tokens: int,
        events: Sequence[FreeEvent],
        swa_locked: AbstractSet[Position],
        waive: Waiver,
    ) -> _Tally:
        """Apply an ``evict``'s free events, checking each victim as it goes (where the
        eviction stopped is checked after). A victim out of order that ``waive``
        acknowledges is applied all the same."""
        out = _Tally(tombstone_leaves_before=set(self._tombstone_leaves()))
        phase1 = num_tokens > 0
        for kind, indices in events:
            if kind not in ("free", "free_swa"):
                continue  # not this model's part to judge: the owner ledger does
            run = self._run_of(indices)
            if phase1 and (out.full_evicted >= num_tokens or not self._evictable_leaves()):
                phase1 = False
            cascade = all(q in self.tombstones for q in run)
            if not phase1:
                # INV-11: phase 2 runs only while SWA tokens are still wanted
                wanted = cascade or out.swa_evicted < swa_num_tokens
                holds_or_waived(wanted, "INV-11", "phase 2 overran", "past-target", waive)
            if kind == "free":
                among = self._evictable_leaves() if phase1 else self._swa_candidates(swa_locked)
                self._delete(run, out, lru=not cascade, among=among, waive=waive)
            else:
                holds(not phase1, "INV-11", "free_swa during phase 1", "phase-order")
                self._tombstone(run, out, swa_locked, waive)
        return out

    def _end_violations(
        self,
        num_tokens: int,
        swa_num_tokens: int,
        out: _Tally,
        swa_locked: AbstractSet[Position],
    ) -> list[SpecViolation]:
        """What is wrong with where an eviction stopped, every rule on its own.

        Checked after its frees were applied, so the model is complete either way: a
        checker that acknowledges one of these can go on from here.
        """
        short_full = num_tokens > 0 and out.full_evicted < num_tokens
        # a tombstone leaf an insert cached (dead_insert="tombstoned") is not the eviction's
        left_leaves = bool(set(self._tombstone_leaves()) - out.tombstone_leaves_before)
        wanted = out.swa_evicted < swa_num_tokens
        short = "freed-less-than-asked"
        rules = [  # (broken, invariant, what, rule)
            (left_leaves, "INV-20", "eviction left a tombstone leaf", "tombstone-leaf"),
            (
                short_full and bool(self._evictable_leaves()),
                "INV-11",
                "phase 1 stopped early",
                short,
            ),
            (
                wanted and bool(self._swa_candidates(swa_locked)),
                "INV-11",
                "phase 2 stopped early",
                short,
            ),
        ]
        return [SpecViolation(inv, what, rule) for broken, inv, what, rule in rules if broken]

    def _run_of(self, indices: tuple[int, ...]) -> list[Position]:
        owners = {
            i: (ns, q)
            for ns, table in self.pages.items()
            for q, page in table.items()
            for i in page
        }
        # INV-7: only cached indices are freed by an eviction
        holds(
            all(i in owners for i in indices),
            "INV-7",
            f"evict freed uncached {indices}",
            "uncached",
        )
        run = sorted({owners[i] for i in indices}, key=lambda q: len(q[1]))
        pages = tuple(i for ns, q in run for i in self.pages[ns][q])
        holds(
            sorted(pages) == sorted(indices), "INV-11", "a free is not whole pages", "partial-page"
        )
        for upper, lower in itertools.pairwise(run):
            holds(
                lower[0] == upper[0] and lower[1] in self.children(*upper),
                "INV-11",
                "a freed run is not one path",
                "not-one-path",
            )
        return run

    def _admissible(self, victim: Position, among: list[Position]) -> bool:
        """The victim order's verdict on recency (widened where a split may refresh)."""
        facts = [LeafFacts(self.recency[q], self.latest[q]) for q in (victim, *among)]
        return self.victims.admissible(facts[0], facts[1:])

    def _evictable_leaves(self) -> list[Position]:
        return [q for q in self.positions() if not self.children(*q) and not self.is_locked(*q)]

    def _tombstone_leaves(self) -> list[Position]:
        return [q for q in self.tombstones if not self.children(*q)]

    def _swa_candidates(self, swa_locked: AbstractSet[Position]) -> list[Position]:
        return [q for q in self.positions() if q not in self.tombstones and q not in swa_locked]

    def _delete(
        self,
        run: list[Position],
        out: _Tally,
        lru: bool,
        among: list[Position],
        waive: Waiver,
    ) -> None:
        leaf = run[-1]
        # INV-11: a whole unlocked leaf, and under LRU the least recently used one
        holds(not self.children(*leaf), "INV-11", f"deleted {leaf!r} has children", "not-leaf")
        holds(
            not any(self.is_locked(*q) for q in run),
            "INV-24",
            "freed a locked page",
            "locked-victim",
        )
        if lru:
            admitted = self._admissible(leaf, among)
            due = [] if admitted else [q for q in among if self._admissible(q, among)]
            message = f"{leaf!r} is not the {self.victims.name} leaf: expected one of {due}"
            holds_or_waived(admitted, "INV-11", message, "victim-order", waive)
        for q in run:
            out.full_evicted += self.page_size
            if q not in self.tombstones:
                out.swa_evicted += self.page_size
            self.tombstones.discard(q)
            ns, path = q
            del self.pages[ns][path]
            if not self.pages[ns]:
                del self.pages[ns]
            del self.recency[q], self.latest[q]
            out.deleted.append(q)

    def _tombstone(
        self, run: list[Position], out: _Tally, swa_locked: AbstractSet[Position], waive: Waiver
    ) -> None:
        # INV-24: SWA KV of a lock's window is never freed, and a tombstone is not a leaf
        holds(
            not set(run) & self.minimum_windows(),
            "INV-24",
            "free_swa inside a lock window",
            "locked-window",
        )
        holds(not set(run) & swa_locked, "INV-24", "free_swa of an SWA-locked node", "swa-locked")
        holds(not set(run) & self.tombstones, "INV-24", "free_swa of a tombstone", "twice")
        holds(bool(self.children(*run[-1])), "INV-20", "tombstoned a leaf")
        admitted = self._admissible(run[-1], self._swa_candidates(swa_locked))
        message = f"tombstoned a node that is not {self.victims.name}"
        holds_or_waived(admitted, "INV-11", message, "victim-order", waive)
        self.tombstones.update(run)
        out.swa_evicted += len(run) * self.page_size
