"""The meaning of RadixCache (non-SWA), as a model shaped unlike a tree.

The model is a map from *page positions* to KV indices. A page position ``(ns, path)`` is
a namespace and a non-empty page-aligned token prefix; it stands for the last page of
``path`` and maps to that page's ``page_size`` KV indices. There are no nodes: a radix
tree is one way to store this map, and a tree bug (a lost split, a wrong child key, a
lock that stops short of the root) shows up as a disagreement with it.

Positions are pages, not tokens, because with ``page_size > 1`` the cached pages
``[1, 2]`` and ``[1, 3]`` hold two different KV indices for the same first token.

The set of cached positions is prefix-closed: a cached path implies each of its shorter
page-aligned prefixes. Besides the map the model keeps, per position:

* ``recency``: the tick of the last match or insert whose path went through it (or lock
  or unlock, for an engine that refreshes on those: ``refresh_on``);
* ``born``: the tick of the insert that (last) added it;
* ``hits``: how many matches returned a path through it since it was added;
* ``priority``: the highest ``priority`` of the inserts whose key covered it since it was
  added (the adding one included);

and ``handles``, a ``Counter`` of outstanding lock handles per position. ``clock`` is the
model's logical clock: each match, insert and reset (and each refreshing lock or unlock)
takes the next tick. Only the order
of ticks is observable, so an implementation's clock may also advance on other calls.

A lock handle (a node object in an implementation) obtained at tick ``t`` is stale once
the cache was reset after ``t`` (``last_reset > t``) or a position on its path is gone or
was born after ``t``: that node was deleted, whatever now sits at its position.

The model's own invariants are asserted by ``PrefixCacheModel.check``, an implementation's
eviction victim by victim (``radixkv_spec.model_eviction``); CrossHair checks the contracts
of the pure helpers it is built from.
"""

import copy
from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from radixkv_spec.invariants import SpecViolation, Waiver, holds, holds_or_waived, never, require
from radixkv_spec.model_eviction import checked_eviction, regrouped
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
    validate_index,
)
from radixkv_spec.policies import (
    DEFAULT_REFRESH,
    LRU_LEAVES,
    WHOLE_LEAVES,
    Eviction,
    LeafFacts,
    VictimOrder,
)
from radixkv_spec.tokens import (
    Namespace,
    PagePath,
    Position,
    Token,
    aligned,
    extends,
    validate_namespace,
    validate_tokens,
)


class PrefixCacheModel(PageMap):
    """The cached pages of a RadixCache, with lock handles and recency (see module doc)."""

    def __init__(
        self,
        page_size: int = 1,
        victims: VictimOrder = LRU_LEAVES,
        *,
        refresh_on: frozenset[str] = DEFAULT_REFRESH,
        stores: bool = True,
        eviction: Eviction = WHOLE_LEAVES,
        flat_report: bool = False,
    ) -> None:
        """An empty cache storing pages of ``page_size`` tokens, under the engine's policies
        (``radixkv_spec.policies``):

        ``victims``: which leaf an eviction may take. Under a policy whose splits (or
        inserts) refresh the rest of a node too, ``latest`` holds the latest tick such a
        refresh could have given each page. ``refresh_on``: the operations that refresh the
        path they touch, ``insert`` always, ``match``, ``lock`` and ``unlock`` as the engine
        does (vLLM and MAX refresh on release, not on lookup; LightLLM's lock is a lookup).
        ``stores``: ``False`` for a cache that never shares (ChunkCache): every insert is
        dropped. ``eviction``: how much one eviction may free
        (``WHOLE_LEAVES``, ``TAIL_PAGES``). ``flat_report``: it tells an eviction's frees as
        one list, not one group per deleted node (MAX's ``evict_blocks``): regrouped by page.

        pre: page_size >= 1
        """
        require(page_size >= 1, f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.victims = victims
        self.refresh_on = refresh_on
        self.stores = stores
        self.eviction = eviction
        self.flat_report = flat_report
        self.pages: dict[Namespace, dict[PagePath, tuple[int, ...]]] = {}
        self.recency: dict[Position, int] = {}
        self.latest: dict[Position, int] = {}
        self.born: dict[Position, int] = {}
        self.hits: Counter[Position] = Counter()
        self.priority: dict[Position, int] = {}
        self.handles: Counter[Position] = Counter()
        self.clock = 0
        self.last_reset = 0

    def __repr__(self) -> str:
        return (
            f"PrefixCacheModel(page_size={self.page_size}, pages={self.pages!r}, "
            f"handles={dict(self.handles)!r}, recency={self.recency!r}, clock={self.clock}, "
            f"last_reset={self.last_reset})"
        )

    # ----------------------------------------------------------------- queries

    def is_cached(self, ns: Namespace, prefix: Sequence[Token]) -> bool:
        """Whether every token of ``prefix`` lies on a cached page path in ``ns``."""
        length = -(-len(prefix) // self.page_size) * self.page_size
        return not prefix or any(
            len(path) == length and extends(path, prefix) for path in self.table(ns)
        )

    def handle_is_stale(self, ns: Namespace, prefix: Sequence[Token], obtained_at: int) -> bool:
        """Whether a handle to ``prefix`` obtained at tick ``obtained_at`` is stale.

        It is stale once the cache was reset since (a reset replaces every node, the
        root included), or once any position on its path was evicted since: the position
        is gone, or it was inserted again after ``obtained_at``.
        """
        return obtained_at < self.last_reset or any(
            not self.has_page(ns, q) or self.born[(ns, q)] > obtained_at
            for q in page_prefixes(tuple(prefix), self.page_size)
        )

    def room(self, ns: Namespace, tokens: Sequence[Token], capacity: int) -> tuple[int, int]:
        """For a cache that allocates its own pages from a pool of ``capacity`` pages: the
        new pages an insert of ``tokens`` needs, and the pages it can find for them.

        It finds the free pages (``capacity`` minus the cached ones) and the unlocked cached
        pages off the key's own cached prefix, which the insert holds while it evicts to make
        room. An unlocked page off that prefix has only unlocked pages off it below, so all
        of them can go, leaves first. The insert must be refused exactly when it needs more
        than it can find (INV-15), and a refusal changes nothing.
        """
        ns = validate_namespace(ns)
        key = aligned(validate_tokens(tokens), self.page_size)
        prefix = key[: cached_len(self.table(ns), key, self.page_size)]
        own = {(ns, q) for q in page_prefixes(prefix, self.page_size)}
        kept = sum(1 for q in self.positions() if q in own or self.is_locked(*q))
        return (len(key) - len(prefix)) // self.page_size, capacity - kept

    def cached_indices(self) -> dict[int, tuple[Namespace, tuple[Token, ...]]]:
        """Every cached KV index, mapped to the token it holds: (ns, the prefix ending there)."""
        return {
            index: (ns, path[: len(path) - self.page_size + offset + 1])
            for index, (ns, path, offset) in self._index_owners().items()
        }

    # ------------------------------------------------------------------- sizes

    def total_size(self) -> int:
        """Cached tokens."""
        return self.page_size * sum(len(table) for table in self.pages.values())

    def protected_size(self) -> int:
        """Cached tokens on the path of some outstanding lock handle."""
        return self.page_size * sum(self.is_locked(ns, path) for ns, path in self.positions())

    def evictable_size(self) -> int:
        """Cached tokens on no lock handle's path."""
        return self.page_size * sum(not self.is_locked(ns, path) for ns, path in self.positions())

    def evictable_leaves(self) -> list[Position]:
        """Unlocked cached positions with nothing cached below them: eviction candidates."""
        return [
            (ns, path)
            for ns, path in self.positions()
            if not self.is_locked(ns, path) and not self.children(ns, path)
        ]

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
        """The KV indices of the longest cached page-aligned prefix of ``tokens``.

        Takes one tick and stamps every position of the matched path with it, if the
        engine's lookups refresh (``refresh_on``). Raises ``TypeError`` / ``ValueError``
        (before any change) for a bad key. ``room`` and ``waive`` are Mamba's (a copy of a
        state): ignored.
        """
        ns = validate_namespace(ns)
        key = aligned(validate_tokens(tokens), self.page_size)
        path = key[: cached_len(self.table(ns), key, self.page_size)]
        tick = self._tick()
        if "match" in self.refresh_on:
            self._touch(ns, path, tick)
        for q in page_prefixes(path, self.page_size):
            self.hits[(ns, q)] += 1
        return MatchOutcome.of(self.indices_of(ns, path))

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
        """Cache the whole pages of ``tokens``; ``prefix_len``: how many of them were cached
        already, ``dropped``: the given indices of those pages the cache does not keep.

        The cache keeps the indices it holds for the cached prefix and adopts
        ``indices[i]`` only where it held nothing. Takes one tick and stamps the whole
        inserted path with it (under a victim order whose inserts stamp whole nodes, a key
        cached whole may have stamped the pages of its last node below it too). New pages
        take ``priority``; cached ones on the key keep the higher of theirs and it. Raises
        (before any change) ``TypeError`` / ``ValueError`` for a bad key or index, and
        ``SpecUsageError`` if ``indices`` is shorter than the aligned key or an adopted index
        is already cached. A cache that never shares (``stores=False``) caches nothing: the
        caller keeps every index. ``prev_prefix_len`` and ``swa_evicted_seqlen`` (a window's)
        and ``state_slot`` (Mamba's) are ignored.
        """
        ns = validate_namespace(ns)
        key = aligned(validate_tokens(tokens), self.page_size)
        if not self.stores:
            return InsertOutcome(0, (), end=0)
        # INV-12: a value shorter than the aligned key would leave tokens without KV
        require(len(indices) >= len(key), f"{len(indices)} indices for {len(key)} tokens")
        values = tuple(validate_index(i) for i in indices[: len(key)])
        prefix_len = cached_len(self.table(ns), key, self.page_size)
        self._require_fresh(values[prefix_len:])
        held = self.indices_of(ns, key[:prefix_len])
        dropped = tuple(i for i, h in zip(values[:prefix_len], held, strict=True) if i != h)
        tick = self._tick()
        split_below = key[:prefix_len]  # a divergence inside a node splits it here
        self._touch(ns, split_below, tick)
        for path in page_prefixes(key, self.page_size)[prefix_len // self.page_size :]:
            self._add_page(ns, path, values[len(path) - self.page_size : len(path)], tick)
        self._touch(ns, key, tick)
        if key and prefix_len == len(key) and self.victims.refreshes_node_on_insert:
            self._widen_below(ns, key, tick)  # the key may end inside a node it stamps whole
        for q in page_prefixes(key, self.page_size):
            self.priority[(ns, q)] = max(self.priority.get((ns, q), priority), priority)
        return InsertOutcome(prefix_len, dropped, end=len(key))

    def lock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Take a lock handle at the cached page position ``prefix`` (the root: no-op); an
        engine whose lock is a lookup (``refresh_on``) stamps the path with a new tick.

        ``obtained_at``, when given, is the tick at which the caller got the handle (the
        model's ``clock`` right after the match or insert that returned it); a stale
        handle is then rejected with ``SpecUsageError``.
        """
        ns, path = self._handle_position(ns, prefix, obtained_at)
        if path:
            self.handles[(ns, path)] += 1
            if "lock" in self.refresh_on:
                self._touch(ns, path, self._tick())

    def unlock(
        self, ns: Namespace, prefix: Sequence[Token], /, *, obtained_at: int | None = None
    ) -> None:
        """Give back one lock handle held at exactly ``prefix`` (the root: no-op); an engine
        that refreshes on release (``refresh_on``) stamps the path with a new tick.

        Raises ``SpecUsageError`` if no handle is held there (or the handle is stale).
        """
        ns, path = self._handle_position(ns, prefix, obtained_at)
        if not path:
            return
        # INV-5: unlocking without a handle would drive a lock count negative
        require(self.handles[(ns, path)] > 0, f"no lock handle is held at {path!r}")
        self.handles[(ns, path)] -= 1
        if not self.handles[(ns, path)]:
            del self.handles[(ns, path)]
        if "unlock" in self.refresh_on:
            self._touch(ns, path, self._tick())

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
        """Check an implementation's ``evict(num_tokens)`` and apply it to the model.

        ``events`` are its frees in order: one ``free`` per deleted node (or, under
        ``flat_report``, one for the whole eviction). Raises ``SpecViolation`` (INV-7 /
        INV-11), leaving the model unchanged, if the eviction was not admissible. A
        violation ``waive`` acknowledges of a rule the model can go on after (where
        eviction stopped, the victim order, how much it freed) is not raised.
        ``swa_num_tokens`` and ``swa_locked`` (a window's) and ``mamba_slots`` (Mamba's)
        are ignored.
        """
        # A negative target is a usage error of evict(), rejected before any change
        require(num_tokens >= 0, f"evict({num_tokens}): the target must be >= 0")
        groups = [tuple(group) for kind, group in events if kind == "free"]
        if self.flat_report:
            groups = regrouped(self, [i for group in groups for i in group])
        before = self.copy()
        try:
            deleted = checked_eviction(self, num_tokens, groups, waive)
            freed = sum(map(len, groups))
            message = f"{self.eviction.name} eviction freed {freed} for a target of {num_tokens}"
            admissible = self.eviction.admissible(freed, num_tokens, self.page_size)
            holds_or_waived(admissible, "INV-11", message, "amount-freed", waive)
        except SpecViolation:
            self._become(before)
            raise
        return EvictionOutcome(freed, deleted=tuple(deleted))

    def evict(self, target: int) -> list[tuple[int, ...]]:
        """Evict like a conforming cache whose nodes are single pages; return the groups.

        One admissible choice among many (the least recent leaf page first), so the
        model can stand in for an implementation when the harness tests itself.
        """
        require(target >= 0, f"evict({target}): the target must be >= 0")
        groups: list[tuple[int, ...]] = []
        while sum(map(len, groups)) < target and self.evictable_leaves():
            ns, path = min(self.evictable_leaves(), key=self.recency.__getitem__)
            groups.append(self.pages[ns][path])
            self._drop_page(ns, path)
        return groups

    def reset(self) -> ResetOutcome:
        """Drop every page and every handle; every index the cache held is to be freed.

        Takes one tick, so every handle obtained before it is stale for good.
        """
        self.last_reset = self._tick()
        freed = [i for ns, path in self.positions() for i in self.pages[ns][path]]
        self.pages.clear()
        self.recency.clear()
        self.latest.clear()
        self.born.clear()
        self.hits.clear()
        self.priority.clear()
        self.handles.clear()
        return ResetOutcome(tuple(freed))

    def check(self) -> None:
        """Assert the model's own invariants (raises ``SpecViolation``)."""
        for ns, path in self.positions():
            self._check_position(ns, path)
        indices = [i for ns, path in self.positions() for i in self.pages[ns][path]]
        # INV-7: no index is held twice
        holds(len(set(indices)) == len(indices), "INV-7", "an index is held twice")
        # INV-8: every cached position has a time and a birth tick, and only those
        holds(set(self.recency) == set(self.positions()), "INV-8", "recency out of sync")
        holds(set(self.latest) == set(self.recency), "INV-8", "latest ticks out of sync")
        holds(set(self.born) == set(self.positions()), "INV-8", "birth ticks out of sync")
        holds(set(self.priority) == set(self.born), "INV-8", "priorities out of sync")
        holds(set(self.hits) <= set(self.born), "INV-8", "hit counts out of sync")
        for (ns, path), count in self.handles.items():
            # INV-5: handles are positive counts at cached positions
            holds(count > 0 and self.has_page(ns, path), "INV-5", f"bad handle at {path!r}")
        # INV-6: every cached token is either evictable or protected
        sizes = self.evictable_size() + self.protected_size()
        holds(sizes == self.total_size(), "INV-6", "sizes do not add up")

    def copy(self) -> "PrefixCacheModel":
        """An independent copy (tokens and indices are immutable, so one level deep)."""
        twin = copy.copy(self)  # the policies are immutable: shared
        twin._become(self)
        return twin

    # --------------------------------------------------------------- internals

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _touch(self, ns: Namespace, path: PagePath, tick: int) -> None:
        for q in page_prefixes(path, self.page_size):
            self.recency[(ns, q)] = tick
            self.latest[(ns, q)] = tick
        if self.victims.refreshes_split_remainder:
            self._widen_below(ns, path, tick)

    def _widen_below(self, ns: Namespace, path: PagePath, tick: int) -> None:
        """The pages a node ending below ``path`` could hold may carry ``tick`` (at latest)."""
        for q in self._single_chain_below(ns, path):
            self.latest[(ns, q)] = tick

    def _single_chain_below(self, ns: Namespace, path: PagePath) -> list[PagePath]:
        """The pages a split at ``path`` could put in its lower half: the chain below it
        while each page has exactly one child (a node never spans a branch point)."""
        chain: list[PagePath] = []
        below = self.children(ns, path)
        while len(below) == 1:
            chain.append(below[0])
            if len(self.children(ns, below[0])) != 1:
                break
            below = self.children(ns, below[0])
        return chain

    def _add_page(self, ns: Namespace, path: PagePath, page: tuple[int, ...], tick: int) -> None:
        self.pages.setdefault(ns, {})[path] = page
        self.born[(ns, path)] = tick
        self.recency[(ns, path)] = self.latest[(ns, path)] = tick
        self.hits.pop((ns, path), None)  # a page added again starts over

    def _drop_page(self, ns: Namespace, path: PagePath) -> None:
        del self.pages[ns][path]
        if not self.pages[ns]:
            del self.pages[ns]
        del self.recency[(ns, path)]
        del self.latest[(ns, path)]
        del self.born[(ns, path)]
        self.hits.pop((ns, path), None)
        del self.priority[(ns, path)]

    def _index_owners(self) -> dict[int, tuple[Namespace, PagePath, int]]:
        """Every cached index, mapped to its page position and its offset in the page."""
        return {
            index: (ns, path, offset)
            for ns, path in self.positions()
            for offset, index in enumerate(self.pages[ns][path])
        }

    def _require_fresh(self, adopted: tuple[int, ...]) -> None:
        # INV-7: an adopted index must have no other owner (the caller allocates fresh ones)
        require(len(set(adopted)) == len(adopted), "INV-7: the same index is adopted twice")
        held = self._index_owners()
        require(not any(i in held for i in adopted), "INV-7: an adopted index is already cached")

    def _handle_position(
        self, ns: Namespace, prefix: Sequence[Token], obtained_at: int | None
    ) -> Position:
        ns = validate_namespace(ns)
        path = validate_tokens(prefix)
        # A handle from before an eviction or reset of its path is a dead node
        stale = obtained_at is not None and self.handle_is_stale(ns, path, obtained_at)
        require(not stale, f"the handle at {path!r} is stale")
        # Handles are nodes, and nodes end on page boundaries of cached paths
        require(self.has_page(ns, path), f"{path!r} is not a cached page position")
        return (ns, path)

    def _become(self, other: "PrefixCacheModel") -> None:
        self.page_size = other.page_size
        self.pages = {ns: dict(table) for ns, table in other.pages.items()}
        self.recency = dict(other.recency)
        self.latest = dict(other.latest)
        self.born = dict(other.born)
        self.hits = Counter(other.hits)
        self.priority = dict(other.priority)
        self.handles = Counter(other.handles)
        self.clock = other.clock
        self.last_reset = other.last_reset

    def _check_position(self, ns: Namespace, path: PagePath) -> None:
        p = self.page_size
        # INV-2: a position is a whole, non-empty page with one index per token
        holds(len(path) > 0 and len(path) % p == 0, "INV-2", f"{path!r} is not page-aligned")
        holds(len(self.pages[ns][path]) == p, "INV-2", f"{path!r} does not hold {p} indices")
        # INV-3: the cached set is prefix-closed: no page hangs below a missing one
        holds(self.has_page(ns, path[:-p]), "INV-3", f"{path!r} has no cached parent")
        # INV-8: a parent is at least as recent as its child
        parent_time = self.recency.get((ns, path[:-p]), self.clock)
        holds(parent_time >= self.recency[(ns, path)], "INV-8", f"{path!r} is newer than parent")

    # ---------------------------------------------------------------- eviction

    def leaf_facts(self, position: Position) -> LeafFacts:
        """What a victim order may know about the cached page ``position``."""
        return LeafFacts(
            self.recency[position],
            self.latest[position],
            self.hits[position],
            self.born[position],
            self.priority[position],
        )
