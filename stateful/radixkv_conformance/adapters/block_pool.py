"""A planted cache of another structure: a block pool that owns allocation.

``BlockPool`` and ``KVCacheManager`` are written as an engine developer writes a paged KV
cache shaped like vLLM v1's, not around the kit's rules, and know nothing of radixkv: a
fixed number of blocks; a free queue in eviction order (a released block joins the tail,
the allocator takes from the head, and a cached block waiting in the queue can still be
hit); a reference count per block; a map from block hash to the full block holding it; a
request's salt mixed into its first block's hash, so salts are namespaces. A prefix is
cached implicitly: block ``i`` of a prompt is found by the hash chain of blocks ``0..i``.

The adapter plays vLLM's scheduler: ``insert`` is a request that allocates its prompt's
blocks (evicting from the queue's head), caches the full ones and finishes; ``lock`` a
request running on a cached path, ``unlock`` its finishing; ``evict(n)`` allocates blocks
until ``n`` tokens' worth of cached ones were evicted and gives them back, empty. An
allocation the pool cannot hold is refused, as the scheduler leaves a request waiting: the
adapter raises ``NoRoom`` (capability ``capacity``). Block ``b`` holds the KV indices
``range(b * page_size, (b + 1) * page_size)``. ``bugs`` plants any of ``BUGS``::

    radixkv check radixkv_conformance.adapters.block_pool:factory --option bugs=refused_ref

Options (``--option KEY=VALUE``): ``blocks`` (the pool's size, default 4: small enough that
a short run fills it, refuses and evicts to make room), ``bugs``. Without bugs it conforms to
``PROFILE``; each bug alone is found, and every pair is reported apart
(``tests/kit/test_no_false_pass.py``, ``tests/kit/test_block_pool.py``).

``vllm_tail`` is the same pool as vLLM builds it: a request also takes a block for its
prompt's unaligned tail (17 tokens at page size 2 need 9 blocks), never cached and free
again when the request finishes; its profile says so (``unaligned_tail="block"``), and
INV-15 counts that block. Two more bugs belong to it (``TAIL_BUGS``)::

    radixkv check radixkv_conformance.adapters.block_pool:vllm_tail --option bugs=tail_kept
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from radixkv_conformance.adapters._planting import planted_bugs
from radixkv_conformance.profile import VLLM_HABITS
from radixkv_conformance.protocol import Host, Indices, Inserted, NoRoom, Sizes

PROFILE = VLLM_HABITS.but(
    name="block-pool",
    notes=(
        "a vLLM-v1-shaped block pool: a lookup never refreshes recency, a release queues a "
        "request's blocks at the free queue's tail (last block first), the pool allocates its "
        "own blocks and evicts from the queue's head only when allocating, a reset is refused "
        "while any block is held; its own block hashes (the salt in the first block's)."
    ),
)

BUGS = {
    "free_hit": "a hit on a cached block waiting in the free queue leaves it there (it can "
    "be reallocated while a request holds it)",
    "head_first": "a finished request's blocks are queued first block first (a parent is "
    "evicted before its child)",
    "stale_hash": "a cached block taken for reuse keeps its entry in the hash map (the old "
    "prompt hits the block's new content)",
    "short_salt": "the salt is mixed into the first block's hash only for prompts of two "
    "blocks or more (one-block prompts of two namespaces share a block)",
    "refused_ref": "an allocation refused for lack of blocks keeps the references it took on "
    "the prompt's cached blocks",
}

TAIL_BUGS = {
    "tail_kept": "a finished request's partial tail block is never given back (the pool "
    "shrinks by a block per unaligned prompt)",
    "tail_uncounted": "the admission check counts the prompt's full blocks only: a prompt "
    "whose tail block the pool cannot hold is admitted, and its allocation fails half way",
}
PROFILES = {
    "vllm_tail": PROFILE.but(
        name="block-pool-vllm-tail",
        unaligned_tail="block",
        notes=f"{PROFILE.notes} A request's unaligned tail takes a block of its own.",
    )
}

BlockHash = bytes
Place = tuple[str | None, tuple[int, ...]]  # (namespace, page-aligned path): the handle


class Block:
    """One KV block: its id, how many requests hold it, and the hash of the full block of
    tokens it caches (``None``: it caches nothing)."""

    __slots__ = ("block_hash", "block_id", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None


class FreeBlockQueue:
    """The blocks no request holds, the next to allocate at the head. A cached block
    released joins the tail, so the head is the least recently released: the eviction
    order. An empty block released goes to the head: it is taken before any cached one."""

    def __init__(self, blocks: Iterable[Block]) -> None:
        self._queue: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in blocks)

    def __len__(self) -> int:
        return len(self._queue)

    def popleft(self) -> Block:
        return self._queue.popitem(last=False)[1]

    def append(self, block: Block) -> None:
        self._queue[block.block_id] = block
        self._queue.move_to_end(block.block_id)

    def appendleft(self, block: Block) -> None:
        self._queue[block.block_id] = block
        self._queue.move_to_end(block.block_id, last=False)

    def remove(self, block: Block) -> None:
        del self._queue[block.block_id]

    def ids(self) -> tuple[int, ...]:
        return tuple(self._queue)


class BlockPool:
    """A fixed number of blocks; ``on_evict`` is told of every block whose cached content
    is dropped (evicted for reuse, or reset)."""

    def __init__(
        self, num_blocks: int, on_evict: Callable[[Block], None], bugs: frozenset[str]
    ) -> None:
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached: dict[BlockHash, Block] = {}
        self.on_evict = on_evict
        self.bugs = bugs

    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def get_cached_block(self, block_hash: BlockHash) -> Block | None:
        return self.cached.get(block_hash)

    def get_new_blocks(self, n: int) -> list[Block]:
        """``n`` blocks from the queue's head, each held once; a cached one is evicted."""
        if n > len(self.free_queue):
            raise ValueError(f"{n} blocks asked, {len(self.free_queue)} free")
        out = []
        for _ in range(n):
            block = self.free_queue.popleft()
            self._drop_content(block)
            block.ref_cnt += 1
            out.append(block)
        return out

    def _drop_content(self, block: Block) -> None:
        if block.block_hash is None:
            return
        if "stale_hash" not in self.bugs and self.cached.get(block.block_hash) is block:
            del self.cached[block.block_hash]
        block.block_hash = None
        self.on_evict(block)

    def touch(self, blocks: Iterable[Block]) -> None:
        """A request holds ``blocks`` (hit in the cache): one reference each; a block
        waiting in the free queue leaves it."""
        for block in blocks:
            if block.ref_cnt == 0 and "free_hit" not in self.bugs:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def cache_full_blocks(self, blocks: list[Block], hashes: list[BlockHash]) -> None:
        """Record ``blocks``, full now, under their hashes (a block already cached keeps its)."""
        for block, block_hash in zip(blocks, hashes, strict=True):
            if block.block_hash is None:
                block.block_hash = block_hash
                self.cached[block_hash] = block

    def free_blocks(self, ordered: Iterable[Block]) -> None:
        """Give back one reference on each block, in eviction order (the first to go first)."""
        for block in ordered:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    self.free_queue.appendleft(block)
                else:
                    self.free_queue.append(block)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block's content; refused (False) while a request holds any."""
        if any(block.ref_cnt > 0 for block in self.blocks):
            return False
        for block in self.blocks:
            self._drop_content(block)
        self.cached.clear()
        return True


class KVCacheManager:
    """Requests' blocks: prompt hashes, the longest cached prefix, allocation, release."""

    def __init__(self, pool: BlockPool, block_size: int, bugs: frozenset[str]) -> None:
        self.pool = pool
        self.block_size = block_size
        self.bugs = bugs
        self.req_to_blocks: dict[str, list[Block]] = {}

    def hash_blocks(self, tokens: tuple[int, ...], salt: str | None) -> list[BlockHash]:
        """The hash of each full block of ``tokens``: a chain over the blocks before it,
        the salt mixed into the first block's."""
        size = self.block_size
        full = len(tokens) // size
        salted = salt is not None and ("short_salt" not in self.bugs or full >= 2)
        hashes: list[BlockHash] = []
        parent = b""
        for i in range(full):
            extra = salt if salted and i == 0 else None
            text = repr((parent, tokens[i * size : (i + 1) * size], extra))
            parent = hashlib.sha256(text.encode()).digest()
            hashes.append(parent)
        return hashes

    def find_longest_cache_hit(self, hashes: list[BlockHash]) -> list[Block]:
        hit: list[Block] = []
        for block_hash in hashes:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hit.append(block)
        return hit

    def allocate(
        self, request_id: str, hashes: list[BlockHash], tail: bool = False
    ) -> list[Block] | None:
        """Hold the prompt's cached blocks and allocate the rest, caching the full ones (and
        one more for an unaligned ``tail``, cached by nobody); ``None`` when the pool cannot
        hold the prompt now (the scheduler tries again later)."""
        hit = self.find_longest_cache_hit(hashes)
        if "refused_ref" in self.bugs:
            self.pool.touch(hit)  # held before the pool is asked, and kept when it says no
        need = len(hashes) - len(hit) + tail
        waiting = sum(1 for block in hit if block.ref_cnt == 0)  # they leave the free queue
        counted = need - tail if "tail_uncounted" in self.bugs else need
        if counted + waiting > self.pool.num_free_blocks():
            return None
        if "refused_ref" not in self.bugs:
            self.pool.touch(hit)
        blocks = hit + self.pool.get_new_blocks(need)
        self.pool.cache_full_blocks(blocks[len(hit) : len(hashes)], hashes[len(hit) :])
        self.req_to_blocks[request_id] = blocks
        return blocks

    def free(self, request_id: str) -> None:
        """A request is over: its blocks go back, the last block first (evicted first)."""
        blocks = self.req_to_blocks.pop(request_id)
        if "tail_kept" in self.bugs and blocks and blocks[-1].block_hash is None:
            blocks = blocks[:-1]  # the partial block is left out of the release
        ordered = blocks if "head_first" in self.bugs else list(reversed(blocks))
        self.pool.free_blocks(ordered)


class BlockPoolAdapter:
    """The kit's adapter: handles are (namespace, path) places, lock tokens request ids."""

    capabilities = frozenset({"namespaces", "reset", "hashing", "unlock_checks", "capacity"})
    usage_errors: tuple[type[BaseException], ...] = (ValueError,)

    def __init__(
        self, page_size: int, host: Host, blocks: int, bugs: frozenset[str], tail: bool = False
    ) -> None:
        self.page_size = page_size
        self.tail = tail  # a request's unaligned tail takes a block (vLLM)
        self.capacity = blocks
        self.host = host
        self.pool = BlockPool(blocks, self._evicted, bugs)
        self.manager = KVCacheManager(self.pool, page_size, bugs)
        self.places: dict[BlockHash, Place] = {}  # block hash -> the page it caches
        self.ids = itertools.count()
        self.evictions = 0
        self.notes = f"{blocks} blocks of page_size tokens; planted bugs: {sorted(bugs) or 'none'}"

    def _evicted(self, block: Block) -> None:
        self.evictions += 1
        self.host.free(self._indices([block]))

    def _indices(self, blocks: Iterable[Block]) -> Indices:
        p = self.page_size
        return tuple(i for b in blocks for i in range(b.block_id * p, (b.block_id + 1) * p))

    def _hit(self, tokens: tuple[int, ...], namespace: str | None) -> list[Block]:
        return self.manager.find_longest_cache_hit(self.manager.hash_blocks(tokens, namespace))

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, Place]:
        hit = self._hit(tokens, namespace)
        return self._indices(hit), (namespace, tokens[: len(hit) * self.page_size])

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        key = tokens[: len(tokens) // self.page_size * self.page_size]
        hashes = self.manager.hash_blocks(key, namespace)
        cached = len(self.manager.find_longest_cache_hit(hashes))
        request = f"r{next(self.ids)}"
        tail = self.tail and len(key) < len(tokens)
        blocks = self.manager.allocate(request, hashes, tail)
        if blocks is None:
            free = self.pool.num_free_blocks()
            need = len(hashes) - cached + tail
            raise NoRoom(f"{need} blocks needed, {free} in the free queue")
        for n in range(cached, len(hashes)):
            self.places[hashes[n]] = (namespace, key[: (n + 1) * self.page_size])
        self.manager.free(request)
        full = blocks[: len(hashes)]
        return Inserted(cached * self.page_size, (namespace, key), indices=self._indices(full))

    def lock(self, handle: Place) -> str:
        """A request running on the handle's cached path: it holds the path's blocks."""
        namespace, path = handle
        hashes = self.manager.hash_blocks(path, namespace)
        hit = self.manager.find_longest_cache_hit(hashes)
        request = f"r{next(self.ids)}"
        self.manager.allocate(request, hashes[: len(hit)])  # nothing new: never refused
        return request

    def unlock(self, handle: Place, token: Any) -> None:
        if token not in self.manager.req_to_blocks:
            raise ValueError(f"no running request {token!r}")
        self.manager.free(token)

    def evict(self, num_tokens: int) -> int:
        """Allocate blocks until ``num_tokens`` tokens of cached ones were evicted (or the
        queue is empty), then give them back empty."""
        start, taken = self.evictions, []
        while (self.evictions - start) * self.page_size < num_tokens:
            if not self.pool.num_free_blocks():
                break
            taken += self.pool.get_new_blocks(1)
        self.pool.free_blocks(taken)
        return (self.evictions - start) * self.page_size

    def reset(self) -> None:
        if not self.pool.reset_prefix_cache():
            raise ValueError("reset refused: a request holds blocks")

    def page_hashes(self, handle: Place) -> list[str]:
        namespace, path = handle
        return [b.block_hash.hex() if b.block_hash else "" for b in self._hit(path, namespace)]

    def sizes(self) -> Sizes:
        cached = [b for b in self.pool.blocks if b.block_hash is not None]
        held = sum(1 for b in cached if b.ref_cnt > 0) * self.page_size
        total = len(cached) * self.page_size
        return Sizes(total - held, held, total)

    def contents(self) -> dict[Place, Indices]:
        return {
            self.places[b.block_hash]: self._indices([b])
            for b in self.pool.blocks
            if b.block_hash is not None
        }

    def snapshot(self) -> Hashable:
        blocks = tuple((b.block_id, b.ref_cnt, b.block_hash) for b in self.pool.blocks)
        cached = tuple(sorted((h, b.block_id) for h, b in self.pool.cached.items()))
        held = tuple(
            sorted(
                (r, tuple(b.block_id for b in bs)) for r, bs in self.manager.req_to_blocks.items()
            )
        )
        return self.pool.free_queue.ids(), blocks, cached, held

    def check(self) -> None:
        """The pool has no check of its own."""


def factory(page_size: int, host: Host, blocks: str | int = 4, bugs: str = "") -> BlockPoolAdapter:
    """A pool of ``blocks`` blocks with the bugs named in ``bugs`` (comma-separated names of
    ``BUGS``)."""
    return _pool(page_size, host, blocks, bugs, BUGS, tail=False)


def vllm_tail(
    page_size: int, host: Host, blocks: str | int = 4, bugs: str = ""
) -> BlockPoolAdapter:
    """The pool as vLLM allocates: a block for each prompt's unaligned tail too (profile
    ``PROFILES["vllm_tail"]``), with the bugs in ``bugs`` (``BUGS`` and ``TAIL_BUGS``)."""
    return _pool(page_size, host, blocks, bugs, {**BUGS, **TAIL_BUGS}, tail=True)


def _pool(
    page_size: int, host: Host, blocks: str | int, bugs: str, known: dict[str, str], tail: bool
) -> BlockPoolAdapter:
    planted = planted_bugs(bugs, known)
    if int(blocks) < 1:
        raise ValueError(f"blocks must be at least 1, got {blocks}")
    return BlockPoolAdapter(page_size, host, int(blocks), planted, tail)
