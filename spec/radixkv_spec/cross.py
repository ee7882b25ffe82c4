"""Cross coverage: what the catalogue of situations does not name.

The situations of ``radixkv_spec.situations`` are the cover points someone listed. A bug
that lives between two of them (an eviction order kept from one eviction to the next and
not refiled when a match refreshes a leaf) passes a run that reached every one. Two
measures need no list, only the spec:

* **Outcome pairs.** Every step has an outcome class the spec gives it (a match that
  found nothing, part of its key or all of it; an insert that added pages, found them all
  cached or was refused; an eviction that freed nothing, part of its target or all of it;
  ...). A run's *pairs* are the classes of each two consecutive steps, ``"insert:new >
  evict:some"``: which operation came right after which, and how each ended.
* **Decisive situations.** A step whose outcome the spec would give differently without
  some earlier step: an eviction whose first victim a refresh since the last eviction
  changed, or a lock taken since then; a match that a split cut short, or that reaches
  pages the last insert added. A cache that forgets the effect of that earlier step gives
  the wrong answer exactly there, so a pass should have been there.

Both are pure functions of a ``Transition`` and of ``Since`` (what the run was at its last
eviction and what its last insert added); nothing here reads the cache under test.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from radixkv_spec.situations import Transition, View, children_of, removed
from radixkv_spec.tokens import Position

Recencies: TypeAlias = Mapping[Position, int]

START = "start"
"""The class before a run's first step."""


def outcome(t: Transition) -> str:
    """The step's operation and its outcome class, ``"op:class"`` (the spec's answer).

    pre: t.page_size >= 1
    post: __return__.startswith(t.op + ":")
    """
    return f"{t.op}:{_class(t)}"


def _class(t: Transition) -> str:
    if t.rejected:
        return "refused"
    if t.op == "match":
        aligned = len(t.tokens) // t.page_size * t.page_size
        found = t.found or 0
        return "none" if not found else ("all" if found >= aligned else "part")
    if t.op == "insert":
        if removed(t):
            return "evicting"  # it made room by evicting (a cache that owns its pool)
        added = t.after.pages - t.before.pages
        revived = t.before.tombstones - t.after.tombstones
        return "new" if added or revived else "cached"
    if t.op == "evict":
        return _eviction_class(t)
    if t.op == "reset":
        return "held" if t.before.locked else "free"
    return "done"


def _eviction_class(t: Transition) -> str:
    changed = removed(t) or (t.after.tombstones - t.before.tombstones)
    if not changed:
        return "none"
    unlocked_left = t.after.pages - t.after.locked - t.after.tombstones
    return "some" if unlocked_left else "all"


def pair(previous: str, current: str) -> str:
    """How the report and the search name two consecutive outcomes."""
    return f"{previous} > {current}"


@dataclass(frozen=True)
class Since:
    """The counterfactuals a decisive situation compares with: the recency of every page and
    the locked pages when the run's last eviction ended (both empty before the first), and
    the pages the run's last insert added."""

    recency: Recencies = field(default_factory=dict)  # empty: no eviction yet
    locked: frozenset[Position] = frozenset()
    inserted: frozenset[Position] = frozenset()


def leaves(view: View, page_size: int, locked: frozenset[Position]) -> list[Position]:
    """Cached pages with no cached page below them, not in ``locked``, not tombstones: what
    an eviction may take first."""
    return [
        q
        for q in view.pages
        if q not in locked and q not in view.tombstones and not children_of(view, q, page_size)
    ]


def first(candidates: list[Position], recency: Callable[[Position], int]) -> Position | None:
    """The least recent of ``candidates`` (ties broken by position, as a total order: the
    namespace ``None`` first, then by name, then the path)."""
    return min(
        candidates, key=lambda q: (recency(q), q[0] is not None, q[0] or "", q[1]), default=None
    )


def _evicted_something(t: Transition) -> bool:
    return t.op == "evict" and not t.rejected and bool(removed(t))


def victim_a_refresh_changed(t: Transition, since: Since, now: Recencies) -> bool:
    """An eviction whose first victim by recency (``now``: the recency before it) is not
    the one the recency at the last eviction gives: a refresh in between decides it."""
    if not _evicted_something(t) or not since.recency:
        return False
    candidates = leaves(t.before, t.page_size, t.before.locked)
    then = first(candidates, lambda q: since.recency.get(q, now[q]))
    return then != first(candidates, now.__getitem__)


def victim_a_lock_changed(t: Transition, since: Since, now: Recencies) -> bool:
    """An eviction whose first victim would be a page locked since the last eviction, were
    that lock not taken: the lock decides it."""
    if not _evicted_something(t):
        return False
    new_locks = t.before.locked - since.locked
    if not new_locks:
        return False
    locked_then = t.before.locked - new_locks
    would = first(leaves(t.before, t.page_size, locked_then), now.__getitem__)
    return would is not None and would in new_locks


def refreshed_before_eviction(t: Transition, since: Since, now: Recencies) -> bool:
    """Near it: an eviction with two candidates or more, one refreshed since the last
    eviction (whether or not that changed which goes first)."""
    if not _evicted_something(t) or not since.recency:
        return False
    candidates = leaves(t.before, t.page_size, t.before.locked)
    return len(candidates) > 1 and any(since.recency.get(q) != now[q] for q in candidates)


def locked_before_eviction(t: Transition, since: Since, now: Recencies) -> bool:
    """Near it: an eviction with a lock taken since the last eviction."""
    return _evicted_something(t) and bool(t.before.locked - since.locked)


def match_at_split(t: Transition, since: Since, now: Recencies) -> bool:
    """Near it: a match whose walk ends at a split point."""
    end = t.walk_end if t.op == "match" and not t.rejected else None
    return end is not None and end in t.splits


def match_a_split_cut(t: Transition, since: Since, now: Recencies) -> bool:
    """A match whose key goes on past a split point the run made, where the cache holds a
    different page: the split decides where the match ends."""
    if t.op != "match" or t.rejected:
        return False
    end = t.walk_end
    aligned = len(t.tokens) // t.page_size * t.page_size
    return end is not None and end in t.splits and len(end[1]) < aligned


def match_reaches_last_insert(t: Transition, since: Since, now: Recencies) -> bool:
    """A match that returns pages the last insert added: that insert decides its length."""
    if t.op != "match" or t.rejected or not t.found or not since.inserted:
        return False
    ns, p = t.namespace, t.page_size
    return any((ns, t.tokens[:n]) in since.inserted for n in range(p, t.found + 1, p))


Predicate: TypeAlias = Callable[[Transition, Since, Recencies], bool]


@dataclass(frozen=True)
class Decisive:
    """A decisive situation; ``near``: a step one condition short of it, which the search
    is steered to while the situation itself was never reached."""

    name: str
    text: str
    reached: Predicate
    ops: tuple[str, ...]  # the operations whose steps can reach it, or come near it
    near: Predicate | None = None
    needs_lru: bool = False  # only where the victim order is least recently used


DECISIVE: tuple[Decisive, ...] = (
    Decisive(
        "decisive:evict-after-refresh",
        "an eviction whose first victim a refresh since the last eviction changed",
        victim_a_refresh_changed,
        ops=("evict",),
        near=refreshed_before_eviction,
        needs_lru=True,
    ),
    Decisive(
        "decisive:evict-after-lock",
        "an eviction whose first victim a lock since the last eviction changed",
        victim_a_lock_changed,
        ops=("evict",),
        near=locked_before_eviction,
        needs_lru=True,
    ),
    Decisive(
        "decisive:match-cut-by-split",
        "a match whose key goes on past a split point where the cache holds another page",
        match_a_split_cut,
        ops=("match",),
        near=match_at_split,
    ),
    Decisive(
        "decisive:match-of-last-insert",
        "a match that returns pages the last insert added",
        match_reaches_last_insert,
        ops=("match",),
    ),
)


def decisive(lru: bool) -> tuple[Decisive, ...]:
    """The decisive situations a run watches: those of eviction order only under LRU."""
    return tuple(d for d in DECISIVE if lru or not d.needs_lru)


NEAR = "near:"
"""The prefix of a near miss's name in a tally: ``near:`` and the situation's name."""


def reached(
    t: Transition, since: Since, now: Recencies, among: tuple[Decisive, ...] = DECISIVE
) -> list[str]:
    """The names of the decisive situations ``t`` reaches, and of those it comes near
    (``NEAR`` and the name) without reaching."""
    names = []
    for d in among:
        if t.op not in d.ops:
            continue
        if d.reached(t, since, now):
            names.append(d.name)
        elif d.near is not None and d.near(t, since, now):
            names.append(NEAR + d.name)
    return names


def after(t: Transition, since: Since, recency: Recencies) -> Since:
    """What ``since`` becomes after ``t`` (``recency``: the model's, after it)."""
    if t.op == "evict" and not t.rejected:
        return Since(dict(recency), t.after.locked, since.inserted)
    if t.op == "insert" and not t.rejected:
        return Since(since.recency, since.locked, t.after.pages - t.before.pages)
    if t.op == "reset" and not t.rejected:
        return Since()
    return since
