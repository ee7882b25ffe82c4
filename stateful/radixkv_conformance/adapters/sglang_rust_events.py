"""sglang 0.5.23's Rust tree core with its binding's KV event queue turned on.

    pip install --no-deps sglang==0.5.23 && pip install msgspec
    radixkv check radixkv_conformance.adapters.sglang_rust_events:factory

The Rust core adapter (``sglang_rust.py``), with ``enable_kv_cache_events=True`` in the
controller's ``CacheInitParams`` (the controller passes it on to the binding). sglang's
controller turns the binding's tagged tuples into its ``kv_events`` classes; that module
stays stubbed here (as in ``sglang_rust.py``), so ``take_events`` reads the binding's queue
itself and writes each tuple as the map sglang would send (tagged ``type``, sglang's field
names: the cache salt as ``cache_salt``). The tuples' fields, by position:
``block_stored``: hashes, parent hash, token ids, block size, medium, cache salt, session
id, extra key; ``block_removed``: hashes, medium, extra key; ``all_blocks_cleared``.

Hashes. The binding's hashes do not depend on the namespace ("LoRA-agnostic"); sglang's
controller reseeds them only when the extra key names a registered LoRA adapter, which no
namespace here does, so the raw hashes are exactly what sglang publishes. They are checked
as names (``event_hashes="opaque"``). As in ``sglang_events.py``, the cache salt sits where
radixkv's ``extra_key`` does: sglang's published ``BlockStored`` carries no extra key.

Reset. The binding's ``reset`` records nothing; sglang's ``UnifiedRadixCache.reset`` asks
the recorder for an ``AllBlocksCleared`` afterwards (``record_all_cleared_event``), and so
does this adapter.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from radixkv_conformance.adapters import sglang_rust as rust_tree
from radixkv_conformance.protocol import Host

PROFILE = dataclasses.replace(rust_tree.PROFILE, event_hashes="opaque")

_WIRE_TAG = {
    "block_stored": "BlockStored",
    "block_removed": "BlockRemoved",
    "all_blocks_cleared": "AllBlocksCleared",
}


class SglangRustEventsAdapter(rust_tree.SglangRustTreeCoreAdapter):
    """The Rust core with events on; ``take_events`` drains the binding's queue."""

    capabilities = rust_tree.CAPABILITIES | {"events"}

    def __init__(self, page_size: int, host: Host) -> None:
        super().__init__(page_size, host)
        self.take_events()  # anything its construction recorded: not part of a run

    def _init_params(self, page_size: int, **options: Any) -> Any:
        return super()._init_params(page_size, enable_kv_cache_events=True, **options)

    def reset(self) -> None:
        super().reset()
        self.core._binding.record_all_cleared_event()

    def take_events(self) -> list[Any]:
        return [_wire(event) for event in self.core._binding.take_events()]


def _wire(event: tuple[Any, ...]) -> dict[str, Any]:
    """One binding tuple as sglang's wire map (``radixkv_spec.events.parse_record``)."""
    tag = _WIRE_TAG.get(event[0])
    if tag == "BlockStored":
        hashes, parent, tokens, block_size, medium, cache_salt = event[1:7]
        return {
            "type": tag,
            "block_hashes": list(hashes),
            "parent_block_hash": parent,
            "token_ids": [t if isinstance(t, int) else list(t) for t in tokens],
            "block_size": block_size,
            "lora_id": None,
            "medium": medium,
            "cache_salt": cache_salt,
        }
    if tag == "BlockRemoved":
        return {"type": tag, "block_hashes": list(event[1]), "medium": event[2]}
    if tag == "AllBlocksCleared":
        return {"type": tag}
    raise AssertionError(f"unknown event from sglang's Rust core: {event!r}")


def factory(page_size: int, host: Host) -> SglangRustEventsAdapter:
    return SglangRustEventsAdapter(page_size, host)
