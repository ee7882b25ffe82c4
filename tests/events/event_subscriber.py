"""A KV-event subscriber written from the wire format alone, run as its own process.

``python -m tests.events.event_subscriber ENDPOINT`` connects a SUB socket to ENDPOINT, prints
``ready``, and then decodes every batch with its own msgspec schema — vLLM 0.33's batch
``[ts, events, data_parallel_rank]`` and its records as maps tagged ``type`` (its required
fields, the namespace as ``cache_salt`` as Dynamo reads it) — and rebuilds the worker's page
set the way a router does, block hashes as unsigned 64-bit ints. It recomputes every stored hash
from the tokens with hashlib (SPEC.md §9), never importing radixkv or its spec. When a line
``end N`` arrives on stdin it reads up to batch N and prints one JSON object: what it saw,
the page set after every batch (as a digest) and at the end, and every rule a batch broke.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import sys
from typing import Any

import msgspec
import zmq


class BlockStored(msgspec.Struct, tag=True, forbid_unknown_fields=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    cache_salt: str | None = None


class BlockRemoved(msgspec.Struct, tag=True, forbid_unknown_fields=True):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(msgspec.Struct, tag=True, forbid_unknown_fields=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int


def page_digest(tokens: list[int], prior: str | None) -> str:
    """SHA-256 of the prior digest's bytes, then the page: 4-byte LE ids (all < 2**32), else
    0xff and 8-byte LE ids."""
    if all(t < 2**32 for t in tokens):
        page = struct.pack(f"<{len(tokens)}I", *tokens)
    else:
        page = b"\xff" + struct.pack(f"<{len(tokens)}Q", *tokens)
    return hashlib.sha256((bytes.fromhex(prior) if prior else b"") + page).hexdigest()


def namespace_seed(extra_key: str | None) -> str | None:
    if extra_key is None:
        return None
    return hashlib.sha256(b"radixkv:namespace:" + extra_key.encode()).hexdigest()


def as_uint64(digest: str) -> int:
    return int(digest[:16], 16)


class Router:
    """One worker's pages: unsigned 64-bit hash -> full digest (the next page's prior)."""

    def __init__(self) -> None:
        self.pages: dict[int, str] = {}
        self.errors: list[str] = []
        self.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
        self.pages_stored = 0

    def apply(self, event: BlockStored | BlockRemoved | AllBlocksCleared) -> None:
        self.counts[type(event).__name__] += 1
        if isinstance(event, BlockStored):
            self.store(event)
        elif isinstance(event, BlockRemoved):
            for h in event.block_hashes:
                if self.pages.pop(h, None) is None:
                    self.errors.append(f"removed {h}, which is not stored")
        else:
            self.pages.clear()

    def store(self, event: BlockStored) -> None:
        p = event.block_size
        if event.parent_block_hash is None:
            prior = namespace_seed(event.cache_salt)
        else:
            prior = self.pages.get(event.parent_block_hash)
            if prior is None:
                self.errors.append(f"parent {event.parent_block_hash} is not stored")
                return
        if len(event.token_ids) != p * len(event.block_hashes):
            self.errors.append("token count is not block_size per page")
            return
        for i, h in enumerate(event.block_hashes):
            prior = page_digest(event.token_ids[i * p : (i + 1) * p], prior)
            if as_uint64(prior) != h:
                self.errors.append(f"hash {h} is not the page's ({as_uint64(prior)})")
            if h in self.pages:
                self.errors.append(f"{h} stored twice without a removal")
            self.pages[h] = prior
            self.pages_stored += 1

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(sorted(self.pages)).encode()).hexdigest()


def main(endpoint: str) -> int:
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(endpoint)
    print("ready", flush=True)
    decoder = msgspec.msgpack.Decoder(KVEventBatch)
    router = Router()
    after: dict[str, str] = {}  # batch number -> digest of the page set after it
    seen: list[int] = []
    end: int | None = None
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while end is None or not seen or seen[-1] < end:
        ready = dict(poller.poll(60_000))
        if not ready:
            router.errors.append("no message for 60 s")
            break
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            line = sys.stdin.readline().split()
            end = int(line[1]) if len(line) == 2 and line[0] == "end" else -1
        if socket in ready:
            _topic, seq_frame, payload = socket.recv_multipart()
            seq = int.from_bytes(seq_frame, "big")
            seen.append(seq)
            batch = decoder.decode(payload)
            if batch.data_parallel_rank != 0:
                router.errors.append(f"batch {seq} from rank {batch.data_parallel_rank}")
            for event in batch.events:
                router.apply(event)
            after[str(seq)] = router.digest()
    gaps = [[a + 1, b] for a, b in itertools.pairwise(seen) if b != a + 1]
    result: dict[str, Any] = {
        "batches": len(seen),
        "first": seen[0] if seen else None,
        "gaps": gaps,
        "counts": router.counts,
        "pages_stored": router.pages_stored,
        "errors": router.errors[:20],
        "after": after,
        "pages": sorted(router.pages),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
