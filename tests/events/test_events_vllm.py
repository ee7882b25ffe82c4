"""radixkv's published batch, decoded by vLLM 0.33's own schema — by hand, not in CI.

    pip download --no-deps 'vllm==0.33.*' -d /tmp/vllm
    VLLM_SRC=/tmp/vllm/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl \\
        pytest tests/events/test_events_vllm.py

The wheel (336 MB, or a folder holding its ``vllm/``) is read in place: only
``vllm/distributed/kv_events.py`` is imported, under bare parent packages, with stand-ins for
the four modules it imports for reasons other than the event schema (its publisher's
configuration class, its logger, its network helpers, and the module defining
``ExternalBlockHash``, which in vLLM 0.33 is ``bytes | int``). Its ``KVEventBatch``,
``BlockStored``, ``BlockRemoved`` and ``AllBlocksCleared`` are vLLM's own, and so is the
msgspec decoder built from them. Skips, saying why, without the variable.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from radixkv_spec.events import EventStreamModel, Stored, parse_record

from radixkv import RadixCache, RadixKey
from radixkv.events import BlockStored, EventRecorder, block_hash
from radixkv.hashing import chain_page_hashes

msgspec = pytest.importorskip("msgspec")
pytest.importorskip("zmq")  # vLLM's module imports it

from radixkv.events.wire import encode_batch  # noqa: E402  # needs msgspec

WHEEL = os.environ.get("VLLM_SRC")
pytestmark = pytest.mark.skipif(
    not WHEEL,
    reason="set VLLM_SRC to vLLM 0.33's wheel (pip download --no-deps 'vllm==0.33.*')"
    " or a folder holding its vllm/: this check is run by hand",
)


@pytest.fixture
def kv_events(monkeypatch: pytest.MonkeyPatch) -> Any:
    """vLLM's ``vllm.distributed.kv_events``, loaded from the wheel as it is."""
    assert WHEEL is not None
    root = Path(WHEEL)
    if not (root / "vllm").exists() and root.suffix != ".whl":
        pytest.fail(f"VLLM_SRC={WHEEL} is neither a wheel nor a folder with vllm/")

    def package(name: str, *path: str) -> None:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(WHEEL, *path)] if path else []
        monkeypatch.setitem(sys.modules, name, module)

    def stand_in(name: str, **attributes: Any) -> None:
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)

    monkeypatch.syspath_prepend(WHEEL)
    package("vllm", "vllm")
    package("vllm.distributed", "vllm", "distributed")
    package("vllm.config")
    package("vllm.utils")
    package("vllm.v1")
    package("vllm.v1.core")
    stand_in("vllm.config.kv_events", KVEventsConfig=dict)
    stand_in("vllm.logger", init_logger=logging.getLogger)
    stand_in(
        "vllm.utils.network_utils",
        get_ip=lambda: "127.0.0.1",
        get_tcp_uri=lambda ip, port: f"tcp://{ip}:{port}",
        is_valid_ipv6_address=lambda ip: False,
        split_zmq_path=lambda path: path.rsplit(":", 2),
    )
    stand_in("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    monkeypatch.delitem(sys.modules, "vllm.distributed.kv_events", raising=False)
    module = importlib.import_module("vllm.distributed.kv_events")
    assert module.__file__ is not None and module.__file__.startswith(WHEEL)
    return module


def test_vllms_own_decoder_reads_radixkvs_batch(kv_events: Any) -> None:
    recorder = EventRecorder(clock=lambda: 1.25)
    cache = RadixCache(2, event_listener=recorder)
    cache.insert(RadixKey([1, 2, 3, 4]))
    cache.insert(RadixKey([1, 2, 5, 6], "tenant"))
    cache.insert(RadixKey([1, 2, 7, 8]))
    cache.evict(2)
    cache.reset()
    batch = recorder.take_batch(data_parallel_rank=1)
    decoded = msgspec.msgpack.Decoder(kv_events.KVEventBatch).decode(encode_batch(batch))
    assert isinstance(decoded, kv_events.KVEventBatch)
    assert decoded.ts == 1.25 and decoded.data_parallel_rank == 1
    kinds = [type(e).__name__ for e in decoded.events]
    assert kinds == [
        "BlockStored",
        "BlockStored",
        "BlockStored",
        "BlockRemoved",
        "AllBlocksCleared",
    ]
    for theirs, ours in zip(decoded.events, batch.events, strict=True):
        assert isinstance(theirs, kv_events.KVCacheEvent)
        if isinstance(theirs, kv_events.BlockStored):
            assert isinstance(ours, BlockStored)
            assert theirs.block_hashes == ours.block_hashes
            assert theirs.parent_block_hash == ours.parent_block_hash
            assert theirs.token_ids == ours.token_ids
            assert (theirs.block_size, theirs.medium) == (2, "GPU")
            assert theirs.lora_id is None and theirs.lora_name is None  # never the namespace
    assert all(0 <= h < 2**64 for e in decoded.events[:4] for h in e.block_hashes)


def test_the_old_positional_records_are_what_vllm_rejected(kv_events: Any) -> None:
    """The control: radixkv's arrays before 2026-11-27 fail vLLM's decoder, as issue 22 saw."""
    old = msgspec.msgpack.encode([1.0, [["AllBlocksCleared"]], 0])
    with pytest.raises(msgspec.ValidationError, match="Expected `object`, got `array`"):
        msgspec.msgpack.Decoder(kv_events.KVEventBatch).decode(old)


def test_the_kit_reads_vllms_own_records_in_vllms_layout(kv_events: Any) -> None:
    """vLLM's encoder's bytes, decoded by the spec: maps by name, the salt from extra_keys
    on the first block, the LoRA name kept apart, a continuation in its parent's namespace."""
    first = [block_hash(h) for h in chain_page_hashes([1, 2, 3, 4], 2, None)]
    events = [
        kv_events.BlockStored(
            block_hashes=first[:1], parent_block_hash=None, token_ids=[1, 2], block_size=2,
            lora_id=None, medium="GPU", lora_name="adapter", extra_keys=[("adapter", "salt")],
        ),
        kv_events.BlockStored(
            block_hashes=first[1:], parent_block_hash=first[0], token_ids=[3, 4], block_size=2,
            lora_id=None, medium="GPU", lora_name="adapter",
        ),
        kv_events.BlockRemoved(block_hashes=first[1:], medium="GPU"),
        kv_events.AllBlocksCleared(),
    ]  # fmt: skip
    payload = msgspec.msgpack.encode(kv_events.KVEventBatch(ts=2.0, events=events))
    ts, records, *rank = msgspec.msgpack.decode(payload)
    assert ts == 2.0 and all(isinstance(r, dict) and "type" in r for r in records)
    assert parse_record(records[0], "vllm") == Stored(
        tuple(first[:1]), None, (1, 2), 2, "salt", "adapter"
    )
    model = EventStreamModel(2, hashes="opaque", layout="vllm")
    model.apply_wire(records[0])
    model.apply_wire(records[1])
    assert model.positions() == {("salt", (1, 2)), ("salt", (1, 2, 3, 4))}
    model.apply_batch([ts, records[2:], *rank])
    assert model.page_set() == frozenset()
