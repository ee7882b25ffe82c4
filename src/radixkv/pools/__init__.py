"""The pools a cache gives back to, in one room: the protocols the caches are typed against
(protocols.py) and the reference pools that implement them.

| protocol         | what a cache calls                                   | reference pool      |
|------------------|------------------------------------------------------|---------------------|
| `KVAllocator`    | `free(indices)`                                      | `KVIndexAllocator`  |
| `SwaKVAllocator` | `free(indices)`, `free_swa(indices)`                 | `HybridKVAllocator` |
| `MambaPool`      | `alloc_track_slot`, `free_track_slot`, `copy_states` | `MambaStatePool`    |

``RadixCache``, ``MambaRadixCache`` and ``ChunkCache`` take a ``KVAllocator`` (a sliding
window needs a ``SwaKVAllocator``, checked when the cache is built); ``MambaRadixCache``
takes a ``MambaPool`` too. The reference pools (allocator.py, mamba_pool.py) refuse double
frees, for users, tests and benchmarks.
"""

from radixkv.pools.allocator import DoubleFreeError, HybridKVAllocator, KVIndexAllocator
from radixkv.pools.mamba_pool import MambaStatePool
from radixkv.pools.protocols import KVAllocator, MambaPool, SwaKVAllocator, free_indices

__all__ = [
    "DoubleFreeError",
    "HybridKVAllocator",
    "KVAllocator",
    "KVIndexAllocator",
    "MambaPool",
    "MambaStatePool",
    "SwaKVAllocator",
    "free_indices",
]
