"""The parts of a cache: what each capability adds to the one tree every cache is.

A tree cache (radix_cache.py) is one ``Tree`` (tree.py: ids, token sizes, locks, recency,
shape) plus one part. The cache runs every operation once for every capability and asks
its part at fixed points, the hooks below; a part changes the tree only through its
public surface, follows its changes through the tree's hooks, and keeps what it needs
per node on its own node class or in its own maps, never on every ``TreeNode``.

- part.py: ``Part``, the hooks, and the part of a full-attention cache (each hook the
  identity or nothing: every cached token usable, an insert's duplicates the caller's).
- swa.py: ``SlidingWindow``, sliding-window attention (``RadixCache(...,
  sliding_window_size=W)``): tombstones, window-constrained matches, SWA locks.
- mamba.py: ``MambaStates``, hybrid attention + SSM models (``MambaRadixCache``): one
  recurrent-state slot per node end, truncating matches, copy-on-write; with its node
  (mamba_node.py: ``MambaTreeNode``) and the seed's intrusive list (lru_list.py:
  ``LRUList``).

What each part does at each hook, in the order the cache asks them (match, insert, lock,
unlock, evict, reset, debugging); "-": as ``Part``, the identity or nothing:

| hook                     | `SlidingWindow` (swa.py)         | `MambaStates` (mamba.py)          |
|--------------------------|----------------------------------|-----------------------------------|
| `node_class`             | `SwaTreeNode`: tombstone, locks  | `MambaTreeNode`: slot, list links |
| `branches`               | no                               | yes: `mamba_branching_seqlen`     |
| `match_end`              | what the window allows; splits   | the deepest state; never splits   |
| `copy_state`             | -                                | `cow=True`: a slot with a copy    |
| `check_insert`           | the two lengths page aligned     | -                                 |
| `check_new`              | -                                | unowned; new tokens need one      |
| `insert_overlap`         | duplicates freed, or adopted     | -                                 |
| `suffix_split`           | live from `swa_evicted_seqlen`   | -                                 |
| `add_tombstone`          | a tombstone for the part below   | -                                 |
| `settle_end`             | -                                | adopts the slot, or `mamba_exist` |
| `check_lock`, `lock`     | not a tombstone; W tokens; an id | has a state; protects it          |
| `check_unlock`, `unlock` | the id's lock (or the newest)    | no id; releases it                |
| `tombstone`              | `swa_tombstone`                  | no state                          |
| `evicted`                | counts `swa_evicted`             | frees the slot, `mamba_evicted`   |
| `evict` (phase 2)        | SWA KV, least recent first       | states, least recent first        |
| `dropped`, `reset`       | forgets locks and sizes          | frees slots; a new root state     |
| `evictable_size` ...     | `swa_*_size`: SWA tokens         | 0 (`mamba_*_size`: its own)       |
| `sizes`, `check`         | SWA sizes; INV-20..22            | mamba sizes; INV-30..33           |
| tree hooks it follows    | `on_added/deleted/split`         | `on_split`, `on_touched`          |

A new kind of part subclasses ``Part`` (with its own ``node_class`` when it keeps
something per node) and overrides the hooks it needs; a cache class hands it to the one
cache code as ``MambaRadixCache`` does: its constructor calls ``RadixCache._build`` with
the part's node class and a function that makes the part for the new tree.
"""

from radixkv.parts.lru_list import LRUList
from radixkv.parts.mamba import MambaStates, RecencyOrder
from radixkv.parts.mamba_node import MambaTreeNode
from radixkv.parts.part import Delete, MakeRoom, Part
from radixkv.parts.swa import SlidingWindow, SwaTreeNode

__all__ = [
    "Delete",
    "LRUList",
    "MakeRoom",
    "MambaStates",
    "MambaTreeNode",
    "Part",
    "RecencyOrder",
    "SlidingWindow",
    "SwaTreeNode",
]
