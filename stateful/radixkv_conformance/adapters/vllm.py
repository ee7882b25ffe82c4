"""vLLM 0.33's prefix cache under the kit: its ``BlockPool`` and ``FullAttentionManager``.

Loaded from the wheel without vLLM's dependencies (``_vllm_import``: ``VLLM_SRC`` names the
wheel or a folder holding ``vllm/``; its ``STUBS`` lists the nine stubbed imports and why:
``vllm.config``, ``vllm.config.kv_events``, ``vllm.utils.network_utils``,
``vllm.multimodal.utils``, ``vllm.utils.torch_utils``, ``vllm.v1.request``, ``vllm.v1.utils``,
``vllm.v1.metrics.stats``, ``cbor2``; plus ``regex`` read as the standard ``re``)::

    VLLM_SRC=/path/to/vllm-0.33.0-...whl radixkv check radixkv_conformance.adapters.vllm:factory

Every kit call is what vLLM's scheduler does with a request. The request is a stand-in with
the fields the cache reads (``vllm.v1.request.Request`` pulls in the whole engine); its block
hashes come from vLLM's own ``get_request_block_hasher`` (sha256, ``cache_salt`` = the
namespace, ``None`` for no salt). ``insert``: find the cached prefix, ``add_local_computed_blocks``
(touch), ``allocate_new_blocks`` (vLLM evicts from the free queue's head; each evicted block
reaches ``host.free``), ``cache_blocks``, then ``free`` the request: the key's blocks become
cached-but-free, tail first. ``lock``: a request holding the path's blocks; ``unlock`` frees it.
``evict(n)``: allocate blocks until ``n`` tokens were evicted, then free them back (uncached).
Block ``b`` holds the page indices ``range(b * p, (b + 1) * p)``; block 0 is vLLM's null block.
An insert the pool cannot hold beside the locked blocks (vLLM's scheduler would not admit
it) ends the run (``NotAdmitted``): vLLM's scheduler refuses it, not its cache.
Options (``--option KEY=VALUE``): ``blocks`` (pool size, default 16), ``events`` (default 1),
``direct`` (default 0).

``direct=1`` drives the ``BlockPool`` itself, as an engine's own code can (its methods are
public), instead of through the manager's per-request bookkeeping: ``lock``
is ``touch`` of the path's blocks (its token: their ids), ``unlock`` is ``free_blocks`` of
those blocks, tail first (with no token: of the blocks the handle's path names now), and
``evict(n)`` takes ``get_new_blocks`` of ``n`` tokens' worth of blocks in one call (whole
blocks, rounded away from zero: a negative count reaches the pool negative), then one block
at a time while short. Nothing is checked on the way, so the adapter claims ``bad_input`` and
``unlock_checks``: the kit then tries ``get_new_blocks`` of a negative count (vLLM 0.33
returns ``[]`` and raises ``num_free_blocks`` by as many) and ``free_blocks`` of a block
nobody holds (``ref_cnt`` goes to -1, the block stays in the free queue); both are vectors
(``tests/vectors/vllm_direct_*.json``). ``bad_input`` also covers tokens and extra keys,
which vLLM checks before its cache (its renderer's ``validate_token_ids``; ``cache_salt`` is
typed ``str``), not in it, and values shorter than their key, where vLLM takes no values at
all: a search with ``direct=1`` reports those five too (``tests/peers/test_vllm_adapter.py``)::

    radixkv check radixkv_conformance.adapters.vllm:factory --option direct=1

(``factory_direct`` is the same, named: what the vectors replay.)
"""

from __future__ import annotations

import importlib
import itertools
import logging
from collections.abc import Hashable
from typing import Any

from radixkv_conformance.adapters._vllm_import import import_module
from radixkv_conformance.profile import VLLM_HABITS
from radixkv_conformance.protocol import Host, Indices, Inserted, NotAdmitted, Sizes

_POOL = import_module("block_pool")  # ImportError saying how to get vLLM when VLLM_SRC is unset
_UTILS = import_module("kv_cache_utils")
_MANAGERS = import_module("single_type_kv_cache_manager")
_INTERFACE = importlib.import_module("vllm.v1.kv_cache_interface")
_HASHING = importlib.import_module("vllm.utils.hashing")
_MSGPACK = importlib.import_module("msgspec.msgpack")  # the events' wire form

PROFILE = VLLM_HABITS.but(
    name="vllm",
    event_hashes="opaque",
    event_layout="vllm",
    notes=(
        "vLLM 0.33 BlockPool + FullAttentionManager: a lookup never refreshes recency, a "
        "release puts blocks at the free queue's tail (tail block first), the pool allocates "
        "its own blocks and evicts from the queue's head only when allocating; "
        "reset_prefix_cache returns False while any block is held; own sha256 block hashes "
        "and int64 event hashes; cache_salt '' is no salt. match looks up every full block "
        "(the scheduler's get_computed_blocks stops one token short: a scheduling choice)."
    ),
)

Place = tuple[str | None, tuple[int, ...]]  # (namespace, page-aligned path): the handle


class ResetRefused(RuntimeError):
    """``BlockPool.reset_prefix_cache`` returned False: some block is still held."""


class _Request:
    """The fields of ``vllm.v1.request.Request`` the prefix cache reads."""

    def __init__(self, rid: str, tokens: tuple[int, ...], salt: str | None, hasher: Any) -> None:
        self.request_id, self.cache_salt = rid, salt
        self.all_token_ids = list(tokens)
        self.num_tokens = self.num_prompt_tokens = len(tokens)
        self.lora_request = self.prompt_embeds = self.session_id = None
        self.mm_features: list[Any] = []
        self.shared_prefix_boundary = 0
        self.block_hashes: list[bytes] = []
        self.block_hashes = hasher(self)


class VllmAdapter:
    usage_errors: tuple[type[BaseException], ...] = (ResetRefused,)

    def __init__(
        self, page_size: int, host: Host, blocks: int, events: bool, direct: bool = False
    ) -> None:
        utils, interface, hashing = _UTILS, _INTERFACE, _HASHING
        logging.getLogger("vllm.v1.core.block_pool").setLevel(logging.ERROR)  # refused resets
        utils.init_none_hash(hashing.sha256)
        self.page_size, self.host, self.utils, self.direct = page_size, host, utils, direct
        self.capabilities = frozenset(
            {"namespaces", "reset", "hashing"}
            | ({"events"} if events else set())
            | ({"bad_input", "unlock_checks"} if direct else set())
        )
        self.hasher = utils.get_request_block_hasher(page_size, hashing.sha256)
        self.pool = _POOL.BlockPool(blocks + 1, True, page_size, enable_kv_cache_events=events)
        spec = interface.FullAttentionSpec(page_size, num_kv_heads=1, head_size=1, dtype=None)
        self.manager = _MANAGERS.FullAttentionManager(spec, self.pool, True, 0, page_size)
        self.places: dict[bytes, Place] = {}  # block hash -> the page it names (for contents)
        self.ids = itertools.count()
        self.evicted = 0  # blocks vLLM evicted so far
        evict_one = self.pool._maybe_evict_cached_block

        def evicting(block: Any) -> bool:  # vLLM's own eviction, reported to the host
            evicted: bool = evict_one(block)
            if evicted:
                self.evicted += 1
                self.host.free(self._indices([block]))
            return evicted

        self.pool._maybe_evict_cached_block = evicting

    def _indices(self, blocks: list[Any]) -> Indices:
        p = self.page_size
        return tuple(i for b in blocks for i in range(b.block_id * p, (b.block_id + 1) * p))

    def _request(self, tokens: tuple[int, ...], ns: str | None) -> Any:
        return _Request(f"r{next(self.ids)}", tokens, ns, self.hasher)

    def _hit(self, request: Any) -> list[Any]:
        blocks, _ = self.manager.find_longest_cache_hit(
            request.block_hashes, request.num_tokens, [0], self.pool,
            self.manager.kv_cache_spec, False, self.page_size,
        )  # fmt: skip
        return list(blocks[0])

    def match(self, tokens: tuple[int, ...], namespace: str | None) -> tuple[Indices, Place]:
        hit = self._hit(self._request(tokens, namespace))
        return self._indices(hit), (namespace, tokens[: len(hit) * self.page_size])

    def insert(self, tokens: tuple[int, ...], namespace: str | None, indices: Indices) -> Inserted:
        p = self.page_size
        key = tokens[: len(tokens) // p * p]
        request = self._request(key, namespace)
        hit = self._hit(request)
        rid, m = request.request_id, self.manager
        need = m.get_num_blocks_to_allocate(
            rid, len(key), hit, len(hit) * p, len(hit) * p, len(key)
        )
        if need > self.pool.get_num_free_blocks():  # the scheduler would not admit it yet
            raise NotAdmitted(f"{need} blocks needed, {self.pool.get_num_free_blocks()} free")
        m.add_local_computed_blocks(rid, hit, len(hit) * p, 0)
        m.allocate_new_blocks(rid, len(key), len(key))
        m.cache_blocks(request, len(key), replay_boundaries=())
        blocks = list(m.req_to_blocks[rid])
        for n, block in enumerate(blocks):
            self.places[block.block_hash] = (namespace, key[: (n + 1) * p])
        m.free(rid)
        return Inserted(len(hit) * p, (namespace, key), indices=self._indices(blocks))

    def lock(self, handle: Place) -> str | tuple[int, ...]:
        request = self._request(handle[1], handle[0])
        hit = self._hit(request)
        if self.direct:  # the pool itself: a reference on each block of the path
            self.pool.touch(hit)
            return tuple(b.block_id for b in hit)
        self.manager.add_local_computed_blocks(
            request.request_id, hit, len(hit) * self.page_size, 0
        )
        return str(request.request_id)

    def unlock(self, handle: Place, token: str | tuple[int, ...] | None) -> None:
        if not self.direct:
            self.manager.free(str(token))
            return
        if token is None:  # a release by a caller that believes it holds the handle's path
            held = self._hit(self._request(handle[1], handle[0]))
        else:
            held = [self.pool.blocks[i] for i in token]
        self.pool.free_blocks(reversed(held))  # tail first, as vLLM's manager frees

    def evict(self, num_tokens: int) -> int:
        taken: list[Any] = []
        start = self.evicted
        if self.direct:  # one get_new_blocks for n tokens, unchecked
            whole = -(-abs(num_tokens) // self.page_size)
            want = whole if num_tokens >= 0 else -whole
            taken += self.pool.get_new_blocks(min(want, self.pool.get_num_free_blocks()))
        while (self.evicted - start) * self.page_size < num_tokens:
            if self.pool.get_num_free_blocks() == 0:
                break
            taken += self.pool.get_new_blocks(1)
        self.pool.free_blocks(taken)  # uncached now: back to the queue's head
        return (self.evicted - start) * self.page_size

    def reset(self) -> None:
        cached = [b for b in self.pool.blocks if b.block_hash is not None]
        if not self.pool.reset_prefix_cache():
            raise ResetRefused("reset_prefix_cache refused: blocks are still held")
        for block in cached:
            self.host.free(self._indices([block]))

    def page_hashes(self, handle: Place) -> list[str]:
        hit = self._hit(self._request(handle[1], handle[0]))
        return [bytes(self.utils.get_block_hash(b.block_hash)).hex() for b in hit]

    def take_events(self) -> list[Any]:
        return [_MSGPACK.decode(_MSGPACK.encode(e)) for e in self.pool.take_events()]

    def sizes(self) -> Sizes:
        cached = [b for b in self.pool.blocks if b.block_hash is not None]
        held = sum(1 for b in cached if b.ref_cnt > 0) * self.page_size
        return Sizes(len(cached) * self.page_size - held, held, len(cached) * self.page_size)

    def contents(self) -> dict[Place, Indices]:
        return {
            self.places[b.block_hash]: self._indices([b])
            for b in self.pool.blocks
            if b.block_hash is not None
        }

    def snapshot(self) -> Hashable:
        queue = tuple(b.block_id for b in self.pool.free_block_queue.get_all_free_blocks())
        blocks = tuple((b.block_id, b.ref_cnt, b.block_hash) for b in self.pool.blocks)
        held = tuple(
            sorted(
                (r, tuple(b.block_id for b in bs)) for r, bs in self.manager.req_to_blocks.items()
            )
        )
        return queue, self.pool.get_num_free_blocks(), blocks, held

    def check(self) -> None:
        """vLLM has no invariant check of its own."""


def factory(
    page_size: int,
    host: Host,
    blocks: str | int = 16,
    events: str | int = 1,
    direct: str | int = 0,
) -> VllmAdapter:
    """vLLM's block pool of ``blocks`` blocks (plus the null block); ``events=0``: no KV
    events; ``direct=1``: lock, unlock and evict call the pool itself (module docstring)."""
    return VllmAdapter(page_size, host, int(blocks), bool(int(events)), bool(int(direct)))


def factory_direct(
    page_size: int, host: Host, blocks: str | int = 16, events: str | int = 1
) -> VllmAdapter:
    """``factory`` with ``direct=1``, under a name a vector's ``outcomes`` can give."""
    return factory(page_size, host, blocks, events, direct=1)
