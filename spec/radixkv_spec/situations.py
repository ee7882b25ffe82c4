"""Situations: the functional coverage points of a conformance run.

A search is a sample, so a pass must say what it sampled. As a hardware verification plan
lists *cover points*, this module lists the situations a prefix cache must be driven into
before "every invariant held" means anything: a match that ends inside a cached run of
pages, an eviction that leaves a locked parent childless, a reset while a request holds
pages, and so on (SPEC.md "Situations").

Each situation is a pure predicate over one ``Transition``: the spec model's state before
and after one step (a ``View``: positions, locks, handles, tombstones, states) and the
step's own arguments. Nothing here reads the implementation under test, so a cache cannot
make a situation look reached; it can only be driven there. Situations are grouped by the
capability that makes them reachable (``None``: the core of every cache that stores pages),
and ``declared`` picks those a run must reach.
"""

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from radixkv_spec.events import router_told
from radixkv_spec.tokens import Namespace, PagePath, Position, Token, extends


class SpecState(Protocol):
    """What a view reads of any of the spec's models."""

    @property
    def handles(self) -> Mapping[Position, int]: ...

    def positions(self) -> list[Position]: ...


@dataclass(frozen=True)
class View:
    """A spec model's state as situations read it."""

    pages: frozenset[Position]
    held: Mapping[Position, int]  # lock handles outstanding at exactly that position
    locked: frozenset[Position]  # positions on some handle's path
    tombstones: frozenset[Position] = frozenset()  # SWA: full KV kept, window KV freed
    states: frozenset[Position] = frozenset()  # Mamba: positions holding a state slot


def view_of(model: SpecState) -> View:
    """The view of a spec model (any of ``PrefixCacheModel``, ``SlidingWindowModel``,
    ``MambaCacheModel``)."""
    pages = frozenset(model.positions())
    held = {p: n for p, n in model.handles.items() if n > 0}
    on_held_paths = {(ns, path[:n]) for ns, path in held for n in range(len(path) + 1)}
    locked = pages & on_held_paths
    tombstones = frozenset(getattr(model, "tombstones", ()))
    states = frozenset(getattr(model, "states", {}))
    return View(pages, held, locked, tombstones, states)


@dataclass(frozen=True)
class Transition:
    """One step: its operation and arguments, and the model's views around it.

    ``handle`` is the position a lock or unlock named; ``handle_evicted`` says the spec had
    evicted that node (not reset it) when the step came; ``splits`` are the positions where
    an earlier match or insert of the run ended inside a run of pages (a tree split there).
    """

    op: str
    before: View
    after: View
    page_size: int
    namespace: Namespace = None
    tokens: tuple[Token, ...] = ()
    rejected: bool = False  # the spec rejects it: a usage error, or an insert with no room
    handle: Position | None = None
    handle_evicted: bool = False
    splits: frozenset[Position] = frozenset()
    amount: int = 0  # an eviction's target in tokens
    found: int | None = None  # the tokens the spec's match returned (None: not a match)

    @cached_property
    def walk_end(self) -> Position | None:
        """The deepest position cached before the step along its aligned key (None: none);
        computed once, as every situation of a match or insert asks for it."""
        p, key = self.page_size, self.tokens
        end = None
        for n in range(p, len(key) // p * p + 1, p):
            if (self.namespace, tuple(key[:n])) not in self.before.pages:
                break
            end = (self.namespace, tuple(key[:n]))
        return end

    @cached_property
    def mid_path(self) -> Position | None:
        """``ends_mid_path`` of this step, computed once."""
        return ends_mid_path(self)


@dataclass(frozen=True)
class Situation:
    name: str
    capability: str | tuple[str, ...] | None  # None: every cache that stores pages; a tuple:
    # any one of them makes it reachable
    text: str
    reached: Callable[[Transition], bool] = field(repr=False)
    ops: tuple[str, ...]  # the operations whose steps can reach it: the only ones it is
    # asked about (``reached``), which keeps the probe of every step cheap
    allocation: str | None = None  # only where the profile's allocation is this


# ---- helpers ----------------------------------------------------------------------------------


def children_of(view: View, position: Position, page_size: int) -> list[Position]:
    ns, path = position
    return [
        q
        for q in view.pages
        if q[0] == ns and len(q[1]) == len(path) + page_size and extends(q[1], path)
    ]


def parent_of(position: Position, page_size: int) -> Position | None:
    ns, path = position
    return (ns, path[:-page_size]) if len(path) > page_size else None


def removed(t: Transition) -> frozenset[Position]:
    return t.before.pages - t.after.pages


def ends_mid_path(t: Transition) -> Position | None:
    """Where a match or insert walk ends with exactly one cached page below it: inside one
    run of pages, where a radix tree that had no boundary there splits a node."""
    end = t.walk_end
    if end is None or len(children_of(t.before, end, t.page_size)) != 1:
        return None
    aligned = len(t.tokens) // t.page_size * t.page_size
    if t.op == "insert" and aligned > len(end[1]):
        return end  # the key diverges below: the insert splits and adds a branch
    return end if t.op == "match" else None


def emptied_parents(t: Transition) -> list[Position]:
    """Surviving positions an eviction left without children."""
    out = []
    for gone in removed(t):
        parent = parent_of(gone, t.page_size)
        survives = parent is not None and parent in t.after.pages
        if survives and parent is not None and not children_of(t.after, parent, t.page_size):
            out.append(parent)
    return out


# ---- the tree ---------------------------------------------------------------------------------


def _match_inside(t: Transition) -> bool:
    return t.op == "match" and t.mid_path is not None


def _split_locked(t: Transition) -> bool:
    if t.op not in ("match", "insert") or t.rejected:
        return False
    end = t.mid_path
    if end is None:
        return False
    (below,) = children_of(t.before, end, t.page_size)
    return below in t.before.locked


def _interior_lock(t: Transition) -> bool:
    if t.op != "lock" or t.rejected or t.handle is None:
        return False
    below = children_of(t.after, t.handle, t.page_size)
    return any(q not in t.after.locked for q in below)


def _evict_empties(t: Transition) -> bool:
    return t.op == "evict" and any(q not in t.before.locked for q in emptied_parents(t))


def _evict_past_locked_parent(t: Transition) -> bool:
    """A locked parent left childless by an eviction that wanted more than it could take:
    a cache that queues a childless parent as a candidate meets the locked one here."""
    freed = len(removed(t)) * t.page_size
    return (
        t.op == "evict"
        and freed < t.amount
        and any(q in t.before.locked for q in emptied_parents(t))
    )


def _evict_every_unlocked(t: Transition) -> bool:
    unlocked_before = t.before.pages - t.before.locked
    return (
        t.op == "evict"
        and bool(unlocked_before)
        and t.after.pages <= t.after.locked
        and bool(t.after.locked)
    )


def _evict_two_namespaces(t: Transition) -> bool:
    return t.op == "evict" and len({ns for ns, _ in removed(t)}) >= 2


def _overlapping_holds(t: Transition) -> bool:
    if t.op != "lock" or t.rejected:
        return False
    held = [q for q, n in t.after.held.items() for _ in range(n) if q[1]]
    for i, a in enumerate(held):
        for b in held[i + 1 :]:
            if a[0] == b[0] and a[1][: t.page_size] == b[1][: t.page_size]:
                return True
    return False


def _last_unlock(t: Transition) -> bool:
    return t.op == "unlock" and not t.rejected and bool(t.before.locked - t.after.locked)


def _reset_held(t: Transition) -> bool:
    return t.op == "reset" and bool(t.before.locked)


def _insert_extends_leaf(t: Transition) -> bool:
    if t.op != "insert" or t.rejected:
        return False
    end = t.walk_end
    if end is None or children_of(t.before, end, t.page_size):
        return False
    return bool(children_of(t.after, end, t.page_size))


def _insert_cached(t: Transition) -> bool:
    aligned = len(t.tokens) // t.page_size * t.page_size
    end = t.walk_end
    return (
        t.op == "insert"
        and not t.rejected
        and aligned > 0
        and end is not None
        and (len(end[1]) == aligned)
    )


def _stale_handle(t: Transition) -> bool:
    return t.op in ("lock", "unlock") and t.handle_evicted


def _insert_evicts(t: Transition) -> bool:
    return t.op == "insert" and bool(removed(t))


def _alloc_refused(t: Transition) -> bool:
    """An insert the spec refuses (the only well-formed one it rejects: a cache that
    allocates from a fixed pool finds no room for the key's new pages) while part of the
    key is cached: the allocation holds that prefix while it looks for room, and a refusal
    must leave it as it was."""
    return t.op == "insert" and t.rejected and t.walk_end is not None


def _removal_after_split(t: Transition) -> bool:
    return t.op == "evict" and any(parent_of(q, t.page_size) in t.splits for q in removed(t))


def _untold_token(path: PagePath) -> bool:
    """A token on ``path`` a router is not told (namespace aside: ``None`` is told)."""
    return not router_told(None, path)


def _insert_untold_token(t: Transition) -> bool:
    """An insert caches a page whose root path holds a token a router is not told: the
    engine's filter must keep it out, and every page that later comes below it."""
    if t.op != "insert" or t.rejected:
        return False
    return any(_untold_token(path) for _, path in t.after.pages - t.before.pages)


# ---- sliding window ---------------------------------------------------------------------------


def _tombstoned(t: Transition) -> bool:
    return t.op == "evict" and bool(t.after.tombstones - t.before.tombstones)


def _revived(t: Transition) -> bool:
    return t.op == "insert" and bool(t.before.tombstones - t.after.tombstones - removed(t))


def _match_past_tombstone(t: Transition) -> bool:
    """A match whose walk crosses a tombstone (the window decides how far it may go)."""
    end = t.walk_end
    if t.op != "match" or end is None:
        return False
    ns, path = end
    p = t.page_size
    return any((ns, path[:n]) in t.before.tombstones for n in range(p, len(path) + 1, p))


def _lock_near_tombstone(t: Transition) -> bool:
    if t.op != "lock" or t.rejected or t.handle is None:
        return False
    ns, path = t.handle
    p = t.page_size
    return any((ns, path[:n]) in t.after.tombstones for n in range(p, len(path) + 1, p))


# ---- Mamba ------------------------------------------------------------------------------------


def _state_evicted(t: Transition) -> bool:
    """Phase two: a state slot dropped from a node whose KV stays cached."""
    lost = t.before.states - t.after.states
    return t.op == "evict" and bool(lost & t.after.pages)


def _match_cut_to_state(t: Transition) -> bool:
    end = t.walk_end
    return t.op == "match" and end is not None and end not in t.before.states


def _split_stateful(t: Transition) -> bool:
    end = t.mid_path if t.op in ("match", "insert") else None
    if end is None:
        return False
    (below,) = children_of(t.before, end, t.page_size)
    return below in t.before.states


def _insert_adds_state(t: Transition) -> bool:
    end = t.walk_end
    return (
        t.op == "insert"
        and end is not None
        and end not in t.before.states
        and (end in t.after.states)
    )


SITUATIONS: tuple[Situation, ...] = (
    Situation(
        "match-inside-a-node",
        None,
        "a match ends inside a run of cached pages",
        _match_inside,
        ops=("match",),
    ),
    Situation(
        "split-of-a-locked-node",
        None,
        "a match or insert splits a locked run",
        _split_locked,
        ops=("match", "insert"),
    ),
    Situation(
        "interior-lock",
        None,
        "a lock on a page whose child stays unlocked",
        _interior_lock,
        ops=("lock",),
    ),
    Situation(
        "evict-empties-a-parent",
        None,
        "an eviction leaves an unlocked parent childless",
        _evict_empties,
        ops=("evict",),
    ),
    Situation(
        "evict-empties-a-locked-parent",
        None,
        "an eviction short of its target leaves a locked parent childless (it must stay)",
        _evict_past_locked_parent,
        ops=("evict",),
    ),
    Situation(
        "evict-every-unlocked-page",
        None,
        "an eviction takes every unlocked page while locked pages stay",
        _evict_every_unlocked,
        ops=("evict",),
    ),
    Situation(
        "overlapping-holds", None, "two held locks share a path", _overlapping_holds, ops=("lock",)
    ),
    Situation(
        "last-unlock", None, "an unlock leaves pages unlocked", _last_unlock, ops=("unlock",)
    ),
    Situation(
        "insert-extends-a-leaf",
        None,
        "an insert grows a cached leaf",
        _insert_extends_leaf,
        ops=("insert",),
    ),
    Situation(
        "insert-fully-cached",
        None,
        "an insert of a key cached whole",
        _insert_cached,
        ops=("insert",),
    ),
    Situation(
        "evict-across-namespaces",
        "namespaces",
        "one eviction takes pages of two namespaces",
        _evict_two_namespaces,
        ops=("evict",),
    ),
    Situation(
        "reset-while-held", "reset", "a reset while locks are held", _reset_held, ops=("reset",)
    ),
    Situation(
        "stale-handle-after-eviction",
        "stale_handles",
        "a lock or unlock names a node an eviction deleted",
        _stale_handle,
        ops=("lock", "unlock"),
    ),
    Situation(
        "removal-after-split",
        ("hashing", "events"),
        "an eviction removes a page below a split point (its hash, its BlockRemoved)",
        _removal_after_split,
        ops=("evict",),
    ),
    Situation(
        "router-untold-token",
        "router_events",
        "an insert caches a page whose root path holds a token a router is not told",
        _insert_untold_token,
        ops=("insert",),
    ),
    Situation(
        "insert-evicts-for-room",
        None,
        "an insert into a cache that owns allocation evicts to make room",
        _insert_evicts,
        allocation="cache",
        ops=("insert",),
    ),
    Situation(  # declared without ``capacity`` too: a pool that is never refused fails it
        "alloc-refused",
        None,
        "an insert with a cached prefix is refused for lack of room in the cache's pool",
        _alloc_refused,
        allocation="cache",
        ops=("insert",),
    ),
    Situation(
        "swa-tombstone",
        "swa",
        "an eviction tombstones a page (phase two)",
        _tombstoned,
        ops=("evict",),
    ),
    Situation(
        "swa-tombstone-revived", "swa", "an insert revives a tombstone", _revived, ops=("insert",)
    ),
    Situation(
        "swa-match-across-a-tombstone",
        "swa",
        "a match walks across a tombstone",
        _match_past_tombstone,
        ops=("match",),
    ),
    Situation(
        "swa-lock-over-a-tombstone",
        "swa",
        "a lock whose path has a tombstone",
        _lock_near_tombstone,
        ops=("lock",),
    ),
    Situation(
        "mamba-state-evicted",
        "mamba",
        "an eviction drops a state, keeping the KV",
        _state_evicted,
        ops=("evict",),
    ),
    Situation(
        "mamba-match-cut-to-a-state",
        "mamba",
        "a match whose KV walk ends where no state is held",
        _match_cut_to_state,
        ops=("match",),
    ),
    Situation(
        "mamba-split-of-a-stateful-node",
        "mamba",
        "a match or insert splits a run whose end holds a state",
        _split_stateful,
        ops=("match", "insert"),
    ),
    Situation(
        "mamba-insert-adds-a-state",
        "mamba",
        "an insert gives a state to a cached position that had none",
        _insert_adds_state,
        ops=("insert",),
    ),
)
BY_NAME: dict[str, Situation] = {s.name: s for s in SITUATIONS}


def declared(
    capabilities: Collection[str], stores: bool = True, allocation: str = "caller"
) -> list[Situation]:
    """The situations a run of a cache with these capabilities must reach: the core ones
    (where it stores pages at all) and its capabilities' own."""
    if not stores:
        return []
    return [
        s
        for s in SITUATIONS
        if _claimed(s.capability, capabilities)
        and (s.allocation is None or s.allocation == allocation)
    ]


def _claimed(needs: str | tuple[str, ...] | None, capabilities: Collection[str]) -> bool:
    if needs is None:
        return True
    return any(c in capabilities for c in ((needs,) if isinstance(needs, str) else needs))


def reached(t: Transition, among: Iterable[Situation] = SITUATIONS) -> list[str]:
    """The names of the situations ``t`` reaches."""
    return [s.name for s in among if t.op in s.ops and s.reached(t)]


def unknown(names: Sequence[str]) -> list[str]:
    """The names that are no situation (a usage error for ``--uncovered-ok``)."""
    return [n for n in names if n not in BY_NAME]
