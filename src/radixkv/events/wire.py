"""The wire form of a batch: msgpack, as vLLM and sglang put KV events on ZeroMQ.

A batch is the msgpack array ``[ts, records]``; each record is a tagged array — its class
name, then its fields in order (``radixkv.events.to_wire``). Needs ``msgspec`` (the
``events`` extra).
"""

from __future__ import annotations

from typing import Any

import msgspec

from radixkv.events import KVEventBatch, to_wire

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def encode_batch(batch: KVEventBatch) -> bytes:
    return _encoder.encode([batch.ts, [to_wire(event) for event in batch.events]])


def decode_batch(payload: bytes) -> list[Any]:
    """A payload as plain values, ``[ts, [[tag, field, ...], ...]]``, for
    ``radixkv_spec.events.EventStreamModel.apply_batch`` or any other reader."""
    decoded = _decoder.decode(payload)
    if not isinstance(decoded, list) or len(decoded) < 2:
        raise ValueError("not a KV event batch: expected the array [ts, records]")
    return decoded
