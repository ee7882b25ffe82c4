"""The meaning of MambaRadixCache, as a model shaped unlike a tree.

The KV part is the page map of ``radixkv_spec.model``: page positions ``(ns, path)`` to the KV
indices of that page, prefix-closed. The mamba part is a map ``states`` from positions to
state slots: the recurrent state after the position's last token. A radix tree can only
hold a state at a node end, so states sit where the implementation's nodes end; the model
does not know the nodes, and every rule below is phrased over positions:

* match: the KV alone matches ``kv_len`` tokens; the result is truncated to the deepest
  matched position holding a state (the root's initial state counts), and the request
  gets a copy of that state (its source slot), never the slot itself; when the pool has
  no slot for the copy, one eviction of one state makes room (the source held), and the
  result describes the cache that eviction left (a miss at the root if it freed no slot);
* insert: new pages need a slot; the position at the key's end adopts the slot unless it
  holds one already (``mamba_exist``);
* locks: a handle sits at a position holding a state and protects that state (mamba
  lock) and every page on its path (full lock);
* recency: each match and insert takes one tick and stamps the path it returns; the LRU
  order is (tick, depth): along one stamped path, deeper is more recent;
* eviction: checked for admissibility against the implementation's frees (``events``),
  replayed one by one (``radixkv_spec.mamba_eviction``).

Leaves (positions with nothing cached below) always hold a state (INV-31).

An engine's habits the model takes as policies (keywords of ``MambaCacheModel``, named as
the kit's profile names them): a leaf whose state went may stay, its KV alone
(``tombstone_leaves``); a lock may end where no state is (``tombstone_locks``); a state's
recency is refreshed only where it is used, at the end of a match or an insert, not by a
path through it (``state_recency="own"``). Under a victim order whose splits refresh both
halves, a match or insert may refresh what a split at the end of its KV walk leaves below
(and, for a match cut back to a state, the walked pages past that state): their recency is
widened to (old tick, new tick), as the plain model widens it.
"""

from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal, TypeAlias

from radixkv_spec.invariants import SpecViolation, Waiver, holds, never, require
from radixkv_spec.mamba_eviction import EvictionReplay
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
    validate_index,
)
from radixkv_spec.policies import (
    DEEPEST_STATE,
    LRU_LEAVES,
    PLAIN_MODEL_ONLY,
    MambaMatchPolicy,
    VictimOrder,
)
from radixkv_spec.tokens import (
    Namespace,
    PagePath,
    Position,
    Token,
    aligned,
    validate_namespace,
    validate_tokens,
)

RecencyKey: TypeAlias = tuple[int, int]
StateRecency = Literal["path", "own"]
"""What refreshes a state's place in the order states are evicted in: every stamp of a path
through it (``"path"``, radixkv), or only a match or an insert that ends at it (``"own"``,
sglang's unified tree: components/mamba.py:126-151)."""


def truncated_len(state_ends: Sequence[int], kv_len: int) -> int:
    """The deepest state end within the KV match; 0 (the root's initial state) if none.

    pre: kv_len >= 0
    post: 0 <= __return__ <= kv_len
    post: __return__ == 0 or __return__ in state_ends
    post: all(n > kv_len or n <= __return__ for n in state_ends)
    """
    return max((n for n in state_ends if 0 < n <= kv_len), default=0)


def branching_seqlen(kv_len: int, prefix_len: int) -> int | None:
    """Where the request's KV match goes on past its state: the KV-only length, else None.

    pre: 0 <= prefix_len <= kv_len
    post: __return__ is None or __return__ > prefix_len
    post: (__return__ is None) == (kv_len == prefix_len)
    """
    return kv_len if kv_len > prefix_len else None


def recency_key(tick: int, path: PagePath) -> RecencyKey:
    """The LRU order of a position: its last tick, then depth (deeper is more recent).

    post: __return__ > recency_key(tick, path[:-1]) or not path
    """
    return (tick, len(path))


def validate_slot(value: object) -> int:
    """Return ``value`` if it is a state slot id (an int >= 0); else raise.

    raises: TypeError, ValueError
    post: __return__ >= 0
    """
    # Slots index a pool; bool is not a slot
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"state slot must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"state slot {value} is negative")
    return int(value)


class MambaCacheModel(PageMap):
    """The cached pages and states of a MambaRadixCache, with handles and recency."""

    def __init__(
        self,
        page_size: int = 1,
        victims: VictimOrder = LRU_LEAVES,
        matching: MambaMatchPolicy = DEEPEST_STATE,
        *,
        tombstone_leaves: bool = False,
        tombstone_locks: bool = False,
        state_recency: str = "path",  # a StateRecency (CrossHair cannot build a Literal)
    ) -> None:
        """An empty cache storing pages of ``page_size`` tokens.

        ``victims`` and ``matching`` are the engine's policies (``radixkv_spec.policies``):
        which victim an eviction may take, and how a match is cut. ``tombstone_leaves``: a
        position whose state went keeps its KV when nothing is cached below it (no INV-31
        cascade); ``tombstone_locks``: a lock may end at a position without a state (it
        holds the KV of its path); ``state_recency``: see ``StateRecency``.

        pre: page_size >= 1
        pre: victims not in PLAIN_MODEL_ONLY
        pre: state_recency in ("path", "own")
        """
        require(page_size >= 1, f"page_size must be >= 1, got {page_size}")
        # The Mamba model ranks by recency only (no hits, births, priorities) and widens no
        # insert's recency
        require(victims not in PLAIN_MODEL_ONLY, f"the Mamba model cannot judge {victims.name}")
        self.page_size = page_size
        self.victims = victims
        self.matching = matching
        self.tombstone_leaves = tombstone_leaves
        self.tombstone_locks = tombstone_locks
        require(state_recency in ("path", "own"), f"state_recency: {state_recency!r}")
        self.state_recency = state_recency
        self.pages: dict[Namespace, dict[PagePath, tuple[int, ...]]] = {}
        self.states: dict[Position, int] = {}
        self.handles: Counter[Position] = Counter()
        self.recency: dict[Position, int] = {}
        self.latest: dict[Position, int] = {}  # the latest tick a split could have given
        self.used: dict[Position, int] = {}  # under "own": when the state there was used
        self.born: dict[Position, int] = {}
        self.clock = 0

    def __repr__(self) -> str:
        return (
            f"MambaCacheModel(page_size={self.page_size}, pages={self.pages!r}, "
            f"states={self.states!r}, handles={dict(self.handles)!r}, clock={self.clock})"
        )

    # ----------------------------------------------------------------- queries

    def has_state(self, ns: Namespace, path: PagePath) -> bool:
        """Whether a state is held at ``path`` (the root always holds the initial state)."""
        return not path or (ns, path) in self.states

    def owned_slots(self) -> set[int]:
        return set(self.states.values())

    def cached_indices(self) -> set[int]:
        return {i for ns, path in self.positions() for i in self.pages[ns][path]}

    def contents(self) -> dict[Position, tuple[tuple[int, ...], int | None]]:
        """Every page position with its KV indices and the slot held there (or None)."""
        return {
            (ns, path): (self.pages[ns][path], self.states.get((ns, path)))
            for ns, path in self.positions()
        }

    def kv_len(self, ns: Namespace, tokens: Sequence[Token]) -> int:
        """How many aligned tokens of ``tokens`` the KV alone covers (no recency change)."""
        key = aligned(validate_tokens(tokens), self.page_size)
        return cached_len(self.pages.get(validate_namespace(ns), {}), key, self.page_size)

    def handle_is_stale(self, ns: Namespace, prefix: PagePath, obtained_at: int) -> bool:
        """A handle is stale once a page on its path was dropped (or re-added) since."""
        return any(
            not self.has_page(ns, q) or self.born[(ns, q)] > obtained_at
            for q in page_prefixes(prefix, self.page_size)
        )

    def key(self, position: Position) -> RecencyKey:
        return recency_key(self.recency[position], position[1])

    def latest_key(self, position: Position) -> RecencyKey:
        """The most recent ``key`` a split could have given the position."""
        return recency_key(self.latest[position], position[1])

    def state_key(self, position: Position) -> RecencyKey:
        """Where the state at ``position`` stands in the order states are evicted in."""
        if self.state_recency == "own":
            return recency_key(self.used[position], position[1])
        return self.key(position)

    # ------------------------------------------------------------------- sizes

    def total_size(self) -> int:
        return self.page_size * len(self.positions())

    def protected_size(self) -> int:
        return self.page_size * sum(self.is_locked(ns, p) for ns, p in self.positions())

    def evictable_size(self) -> int:
        return self.total_size() - self.protected_size()

    def mamba_protected_size(self) -> int:
        """State slots whose position holds a handle (units: slots, not tokens)."""
        return sum(1 for pos in self.states if self.handles[pos] > 0)

    def mamba_evictable_size(self) -> int:
        return len(self.states) - self.mamba_protected_size()

    # -------------------------------------------------------------- operations

    def match(
        self,
        ns: Namespace,
        tokens: Sequence[Token],
        /,
        *,
        room: Sequence[FreeEvent] | None = None,
        waive: Waiver = never,
    ) -> MatchOutcome:
        """Truncate the KV match to its deepest state (INV-34); stamp that path.

        ``room``: the pool had no slot for the copy of the state (copy-on-write), and these
        are the implementation's frees making room, in order (``apply_eviction``'s events).
        They are checked as ``evict(0, 1)`` with the source position held (its state
        survives); the copy goes into the slot that eviction freed, and without one the
        match is a miss at the root. Either way the result describes the cache as that
        eviction left it: a copy that makes room answers for the cache it leaves
        (docs/decisions.md, 2026-11-28). Raises ``SpecViolation`` (INV-34, or the eviction's),
        leaving the model unchanged, except for what ``waive`` acknowledges.
        """
        ns = validate_namespace(ns)
        key = aligned(validate_tokens(tokens), self.page_size)
        deepest, kv_len, state_ends = self._walk(ns, key)
        copied = self.matching.copies_state and deepest > 0
        if room is not None:
            # INV-34: only a copy asks the pool for a slot
            holds(copied, "INV-34", "made room for a copy where none is due", "room-no-copy")
            self._make_room(ns, key[:deepest], room, waive)
            if not any(kind == "slot" for kind, _ in room):  # no slot to copy into: a miss
                _, kv_len, _ = self._walk(ns, key)
                self._stamp(ns, ())
                return MatchOutcome((), 0, None, branching_seqlen(kv_len, 0))
            deepest, kv_len, state_ends = self._walk(ns, key)  # the cache the room left
        prefix_len = self.matching.matched_len(kv_len, state_ends)
        path = key[:prefix_len]
        self._stamp(ns, path)
        walked = page_prefixes(key[:kv_len], self.page_size)[prefix_len // self.page_size :]
        self._widen(ns, [*walked, *self._split_remainder(ns, key[:kv_len])])
        self._use_state(ns, path)
        return MatchOutcome(
            indices=path_indices(self.pages.get(ns, {}), path, self.page_size),
            prefix_len=prefix_len,
            source_slot=self.states.get((ns, key[:deepest])) if copied else None,
            branching_seqlen=branching_seqlen(kv_len, deepest),
        )

    def _walk(self, ns: Namespace, key: PagePath) -> tuple[int, int, list[int]]:
        """(the deepest state end, the KV-only length, every state end) of ``key``'s match."""
        kv_len = cached_len(self.pages.get(ns, {}), key, self.page_size)
        ends = [len(q) for q in page_prefixes(key[:kv_len], self.page_size)]
        state_ends = [n for n in ends if self.has_state(ns, key[:n])]
        return truncated_len(state_ends, kv_len), kv_len, state_ends

    def _make_room(
        self, ns: Namespace, source: PagePath, events: Sequence[FreeEvent], waive: Waiver
    ) -> None:
        """The copy's ``evict(0, 1)``, with a handle at ``source`` meanwhile."""
        self.handles[(ns, source)] += 1
        try:
            self.apply_eviction(0, events, waive=waive, mamba_slots=1)
        finally:
            self.handles[(ns, source)] -= 1
            if not self.handles[(ns, source)]:
                del self.handles[(ns, source)]

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
        """Cache the pages of ``tokens`` and the state after them, in ``state_slot``
        (``state_existed``: ``mamba_exist``; the given slot is then dropped).

        Raises ``SpecUsageError`` (before any change) for a short ``indices``, an index or
        a slot the cache already holds, or new pages without a slot (``TypeError`` /
        ``ValueError`` for a bad key, index or slot). ``priority`` (the plain model's),
        ``prev_prefix_len`` and ``swa_evicted_seqlen`` (a window's) are ignored.
        """
        ns = validate_namespace(ns)
        key = aligned(validate_tokens(tokens), self.page_size)
        given = None if state_slot is None else validate_slot(state_slot)
        require(len(indices) >= len(key), f"{len(indices)} indices for {len(key)} tokens")
        values = tuple(validate_index(i) for i in indices[: len(key)])
        prefix_len = cached_len(self.pages.get(ns, {}), key, self.page_size)
        # INV-33: a slot the tree holds is never handed in again
        require(given is None or given not in self.owned_slots(), f"slot {given} is cached")
        # INV-31: a leaf without a state could never be matched
        require(given is not None or prefix_len == len(key), "new pages need a mamba slot")
        held = self.indices_of(ns, key[:prefix_len])
        dropped = tuple(i for i, h in zip(values[:prefix_len], held, strict=True) if i != h)
        adopted = values[prefix_len:]
        require(not set(adopted) & self.cached_indices(), "INV-7: an adopted index is cached")
        require(len(set(adopted)) == len(adopted), "INV-7: the same index is adopted twice")
        remainder = self._split_remainder(ns, key[:prefix_len])  # before new pages branch off
        self.clock += 1
        for path in page_prefixes(key, self.page_size)[prefix_len // self.page_size :]:
            self.pages.setdefault(ns, {})[path] = values[len(path) - self.page_size : len(path)]
            self.born[(ns, path)] = self.clock
        mamba_exist = self.has_state(ns, key)
        if not mamba_exist and given is not None:
            self.states[(ns, key)] = given
        self._stamp(ns, key, tick=self.clock)
        self._widen(ns, remainder)
        self._use_state(ns, key)
        slots = (given,) if mamba_exist and given is not None else ()
        return InsertOutcome(prefix_len, dropped, len(key), mamba_exist, slots)

    def lock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Take a handle at ``prefix``, which must hold a state unless the model takes
        ``tombstone_locks`` (the root: no-op). ``obtained_at``, when given, is the tick at
        which the caller got the handle (the model's ``clock`` right after the match or
        insert that returned it): a stale handle (``handle_is_stale``) is then rejected
        with ``SpecUsageError``."""
        ns, path = self._position(ns, prefix, obtained_at)
        if path:
            # INV-30: a handle protects the state its request resumes from
            stateful = self.has_state(ns, path) or self.tombstone_locks
            require(stateful, f"{path!r} holds no state to lock")
            self.handles[(ns, path)] += 1

    def unlock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Give back one handle held at exactly ``prefix`` (the root: no-op); a stale one
        is rejected, as by ``lock``."""
        ns, path = self._position(ns, prefix, obtained_at)
        if path:
            # INV-30: an unlock no lock matches would drive a lock count negative
            require(self.handles[(ns, path)] > 0, f"no lock handle is held at {path!r}")
            self.handles[(ns, path)] -= 1
            if not self.handles[(ns, path)]:
                del self.handles[(ns, path)]

    def reset(self) -> ResetOutcome:
        """Drop everything; every KV index and every slot the cache held is to be freed."""
        indices, slots = sorted(self.cached_indices()), sorted(self.owned_slots())
        freed = ResetOutcome(tuple(indices), slots=tuple(slots))
        self.pages.clear()
        self.states.clear()
        self.handles.clear()
        self.recency.clear()
        self.latest.clear()
        self.used.clear()
        self.born.clear()
        return freed

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
        """Check an implementation's ``evict(num_tokens, mamba_slots)`` and apply it.

        ``events`` are its frees in order: one ``free`` (KV) per deleted node, each followed
        by the ``slot`` of the node's state if it had one, and lone slots for tombstoned
        inner nodes. Raises
        ``SpecViolation`` (INV-35, INV-31, INV-33), leaving the model unchanged, except for
        what ``waive`` acknowledges of the rules the model can go on after (where eviction
        stopped, the victim order). ``swa_num_tokens`` and ``swa_locked`` (a window's) are
        ignored.
        """
        before = self._copy()
        eviction = EvictionReplay(self, num_tokens, mamba_slots, waive)
        try:
            eviction.run([(kind, tuple(p)) for kind, p in events if kind in ("free", "slot")])
        except SpecViolation:
            self.__dict__.update(before.__dict__)
            raise
        return EvictionOutcome(
            eviction.tokens, mamba_evicted=eviction.slots, deleted=eviction.deleted
        )

    def check(self) -> None:
        """Assert the model's own invariants (raises ``SpecViolation``)."""
        p = self.page_size
        for ns, path in self.positions():
            holds(self.has_page(ns, path[:-p]), "INV-3", f"{path!r} has no cached parent")
            leaf = not self.children(ns, path)
            kept = self.tombstone_leaves or self.has_state(ns, path)
            holds(not leaf or kept, "INV-31", f"leaf {path!r} has no state")
        holds(all(self.has_page(*pos) for pos in self.states), "INV-31", "state off the map")
        slots = list(self.states.values())
        holds(len(set(slots)) == len(slots), "INV-33", "a slot is held at two positions")
        for pos, count in self.handles.items():
            held = pos in self.states or (self.tombstone_locks and self.has_page(*pos))
            holds(count > 0 and held, "INV-30", f"handle at {pos!r} has no state")

    # ---------------------------------------------------------------- helpers

    def _stamp(self, ns: Namespace, path: PagePath, tick: int | None = None) -> None:
        if tick is None:
            self.clock += 1
            tick = self.clock
        for q in page_prefixes(path, self.page_size):
            self.recency[(ns, q)] = self.latest[(ns, q)] = tick

    def _split_remainder(self, ns: Namespace, path: PagePath) -> list[PagePath]:
        """Under a victim order whose splits refresh the lower half too: the pages a split
        at the end of ``path`` could put in it, the single-child chain below (a node never
        spans a branch point); else nothing."""
        chain: list[PagePath] = []
        if not (self.victims.refreshes_split_remainder and path):
            return chain
        below = self.children(ns, path)
        while len(below) == 1:
            chain.append(below[0])
            below = self.children(ns, below[0])
        return chain

    def _widen(self, ns: Namespace, paths: Sequence[PagePath]) -> None:
        """Under a victim order whose splits refresh both halves: ``paths`` may carry the
        clock's tick (at latest)."""
        if self.victims.refreshes_split_remainder:
            for q in paths:
                self.latest[(ns, q)] = self.clock

    def _use_state(self, ns: Namespace, path: PagePath) -> None:
        """The state at ``path`` (if any) was used now: a match or an insert ended there
        (kept under ``state_recency="own"`` only: nothing else reads it)."""
        if self.state_recency == "own" and path and (ns, path) in self.states:
            self.used[(ns, path)] = self.clock

    def _position(
        self, ns: Namespace, prefix: Sequence[Token], obtained_at: int | None
    ) -> Position:
        ns = validate_namespace(ns)
        path = validate_tokens(prefix)
        # A handle from before an eviction of its path is a dead node
        stale = obtained_at is not None and self.handle_is_stale(ns, path, obtained_at)
        require(not stale, f"the handle at {path!r} is stale")
        require(self.has_page(ns, path), f"{path!r} is not a cached page position")
        return (ns, path)

    def _copy(self) -> "MambaCacheModel":
        other = MambaCacheModel(
            self.page_size,
            self.victims,
            self.matching,
            tombstone_leaves=self.tombstone_leaves,
            tombstone_locks=self.tombstone_locks,
            state_recency=self.state_recency,
        )
        other.pages = {ns: dict(table) for ns, table in self.pages.items()}
        other.states = dict(self.states)
        other.handles = Counter(self.handles)
        other.recency = dict(self.recency)
        other.latest = dict(self.latest)
        other.used = dict(self.used)
        other.born = dict(self.born)
        other.clock = self.clock
        return other

    def _drop(self, ns: Namespace, path: PagePath) -> None:
        del self.pages[ns][path]
        if not self.pages[ns]:
            del self.pages[ns]
        del self.recency[(ns, path)]
        del self.latest[(ns, path)]
        del self.born[(ns, path)]

    def full_candidates(self) -> list[Position]:
        """Phase 1 candidates: unlocked positions with nothing cached below."""
        return [
            (ns, p)
            for ns, p in self.positions()
            if not self.children(ns, p) and not self.is_locked(ns, p)
        ]

    def mamba_candidates(self) -> list[Position]:
        """Phase 2 candidates: positions holding a state with no handle there."""
        return [pos for pos in self.states if self.handles[pos] == 0]
