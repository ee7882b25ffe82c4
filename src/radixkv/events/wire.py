"""The wire form of a batch: msgpack, as vLLM 0.33 and sglang 0.5.23 put KV events on ZeroMQ.

A batch is the msgpack array ``[ts, records, data_parallel_rank]`` (vLLM's array-like
``KVEventBatch``); each record is a map tagged ``type`` with vLLM's field names
(``radixkv.events.to_wire``). Needs ``msgspec`` (the ``events`` extra).
"""

from __future__ import annotations

from typing import Any

from radixkv.events import KVEventBatch, extra_missing, to_wire

try:
    import msgspec
except ImportError as missing:  # the events extra is optional: say how to get it
    raise extra_missing(__name__, "msgspec", missing) from missing

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def encode_batch(batch: KVEventBatch) -> bytes:
    """The batch as sent, every record included (the publisher filters before this)."""
    records = [to_wire(event) for event in batch.events]
    return _encoder.encode([batch.ts, records, batch.data_parallel_rank])


def decode_batch(payload: bytes) -> list[Any]:
    """A payload as plain values, ``[ts, [{"type": tag, field: value, ...}, ...], rank]``,
    for ``radixkv_spec.events.EventStreamModel.apply_batch`` or any other reader. A batch of
    two items (``[ts, records]``, radixkv before 2026-11-27) is read too."""
    decoded = _decoder.decode(payload)
    if not isinstance(decoded, list) or not 2 <= len(decoded) <= 3:
        raise ValueError("not a KV event batch: expected the array [ts, records, rank]")
    return decoded
