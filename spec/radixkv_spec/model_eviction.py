"""The plain model's eviction check: an implementation's frees replayed against a
``PrefixCacheModel``, victim by victim.

``PrefixCacheModel.apply_eviction`` reads an eviction's ``free`` events as one group of
indices per deleted node (``regrouped``: a flat report, one group per page, in the order
a per-node report would give), and ``checked_eviction`` deletes each group's pages,
checking that it is a run of whole pages ending at an unlocked leaf the victim order
admits, and where the eviction stopped (INV-7, INV-11). The check changes the model as it
goes: ``apply_eviction`` restores it if a check raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv_spec.invariants import Waiver, holds, holds_or_waived
from radixkv_spec.tokens import Position

if TYPE_CHECKING:  # the model imports this module: a cycle at run time
    from radixkv_spec.model import PrefixCacheModel


def checked_eviction(
    model: PrefixCacheModel, target: int, groups: list[tuple[int, ...]], waive: Waiver
) -> list[Position]:
    """Delete each freed group's pages, each victim checked; return what was deleted."""
    # INV-11: a zero target deletes nothing
    message = f"evict({target}) deleted nodes"
    holds_or_waived(target > 0 or not groups, "INV-11", message, "zero-target", waive)
    freed, deleted = 0, list[Position]()
    for group in groups:
        # INV-11: eviction stops as soon as the target is reached
        message = f"went on evicting after freeing {freed} >= {target}"
        holds_or_waived(freed < target, "INV-11", message, "past-target", waive)
        deleted.extend(_checked_victim(model, group, waive))
        freed += len(group)
    # INV-11: eviction stops short only when nothing evictable is left
    stopped_early = freed < target and bool(model.evictable_leaves())
    message = f"freed {freed} < {target} with leaves left"
    holds_or_waived(not stopped_early, "INV-11", message, "short", waive)
    return deleted


def _checked_victim(
    model: PrefixCacheModel, group: tuple[int, ...], waive: Waiver
) -> list[Position]:
    run = _victim_run(model, group)
    ns, leaf = run[-1]
    # INV-11: a victim ends at a leaf: nothing is cached below it
    holds(not model.children(ns, leaf), "INV-11", f"victim {leaf!r} is not a leaf", "not-leaf")
    # INV-11: a victim is one branch: no other page hangs below its upper pages
    lone = all(len(model.children(ns, path)) == 1 for _, path in run[:-1])
    holds(lone, "INV-11", f"victim ending at {leaf!r} cuts off a sibling branch", "cuts-branch")
    # INV-11: locked pages are never evicted
    locked = any(model.is_locked(ns, path) for _, path in run)
    holds(not locked, "INV-11", f"victim ending at {leaf!r} is locked", "locked-victim")
    # INV-11: the victim is one the engine's victim order admits (LRU: the least
    # recently used evictable leaf, ties allowed)
    leaves = model.evictable_leaves()
    candidates = [model.leaf_facts(pos) for pos in leaves]
    admitted = model.victims.admissible(model.leaf_facts((ns, leaf)), candidates)
    message = ""
    if not admitted:  # name the namespace and the leaves the order would have taken
        due = [q for q in leaves if model.victims.admissible(model.leaf_facts(q), candidates)]
        message = (
            f"victim {leaf!r} (namespace {ns!r}) is not {model.victims.name}: "
            f"expected one of {sorted(due, key=repr)}"
        )
    holds_or_waived(admitted, "INV-11", message, "victim-order", waive)
    for _, path in run:
        model._drop_page(ns, path)
    return run


def regrouped(model: PrefixCacheModel, flat: list[int]) -> list[tuple[int, ...]]:
    """A flat eviction report as one group per page, in an order that deletes a leaf
    each time, the least recent leaf first: the order a per-node report would give if
    the eviction was admissible. Indices the model does not cache, and pages that never
    become leaves, stay at the end for the eviction's checks to refuse."""
    owners = model._index_owners()
    left = {(ns, path) for ns, path, _ in (owners[i] for i in flat if i in owners)}
    cached = set(model.positions())
    ordered: list[tuple[int, ...]] = []
    while left:
        leaves = [q for q in left if not any((q[0], c) in cached for c in model.children(*q))]
        if not leaves:
            break
        page = min(leaves, key=lambda q: (model.recency[q], len(q[1])))
        ordered.append(model.pages[page[0]][page[1]])
        left.discard(page)
        cached.discard(page)
    stuck = [model.pages[ns][path] for ns, path in left]  # never a leaf: not one path
    unknown = [(i,) for i in flat if i not in owners]
    return ordered + stuck + unknown


def _victim_run(model: PrefixCacheModel, group: tuple[int, ...]) -> list[Position]:
    """The positions a freed group held, checked to be whole pages along one path."""
    p = model.page_size
    # INV-11: a victim frees whole pages
    holds(
        len(group) > 0 and len(group) % p == 0,
        "INV-11",
        f"freed {len(group)} tokens",
        "partial-page",
    )
    owners = model._index_owners()
    # INV-7: only indices the cache holds may be freed, each once
    holds(
        all(i in owners for i in group),
        "INV-7",
        "freed an index the cache does not hold",
        "uncached",
    )
    holds(len(set(group)) == len(group), "INV-7", "freed the same index twice", "twice")
    ns, leaf, _ = owners[group[-1]]
    pages = len(group) // p
    # INV-11: the group is the indices of a run of pages ending at ``leaf``, in order
    holds(pages * p <= len(leaf), "INV-11", f"freed more pages than {leaf!r} has", "not-one-path")
    run = [(ns, leaf[: len(leaf) - k * p]) for k in reversed(range(pages))]
    held = tuple(i for _, path in run for i in model.pages[ns][path])
    holds(
        held == group,
        "INV-11",
        f"freed indices are not the path ending at {leaf!r}",
        "not-one-path",
    )
    return run
