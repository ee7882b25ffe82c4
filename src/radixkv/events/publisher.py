"""Publish a cache's KV events over ZeroMQ, in the frames vLLM's and sglang's routers read.

Every batch is one multipart message: the topic, the batch's sequence number as 8 bytes
big-endian (0, 1, 2, ... per publisher), and the msgpack payload (``radixkv.events.wire``).
A subscriber that sees a number jump knows it missed batches (``SequenceTracker``) and must
rebuild its view of this worker (for example from an ``AllBlocksCleared`` or a restart).

The socket is an XPUB: it behaves as a PUB socket for subscribers and lets
``wait_for_subscribers`` see them arrive, so a replay does not publish into the void while a
subscriber is still connecting. Needs ``pyzmq`` and ``msgspec`` (the ``events`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

import zmq

from radixkv.events import KVCacheEvent, KVEventBatch
from radixkv.events.wire import encode_batch

SEQ_BYTES = 8


class ZmqEventPublisher:
    """An event listener for a cache that sends what it heard, one batch per ``publish``.

    Pass it as a cache's ``event_listener``; call ``publish`` after each scheduler step.
    ``endpoint`` is bound (``tcp://127.0.0.1:*`` picks a free port: read ``endpoint``).
    Sending never blocks the caller: ZeroMQ queues, and drops for a slow subscriber past
    its high-water mark — which the sequence numbers reveal.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        topic: str = "",
        clock: Callable[[], float] = time.time,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
    ) -> None:
        self._context = context if context is not None else zmq.Context.instance()
        self._socket = self._context.socket(zmq.XPUB)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.bind(endpoint)
        last = self._socket.getsockopt(zmq.LAST_ENDPOINT)
        self.endpoint = last.decode() if isinstance(last, bytes) else endpoint
        self.topic = topic.encode()
        self._clock = clock
        self._pending: list[KVCacheEvent] = []
        self.next_seq = 0
        self.events_sent = 0
        self.subscribers = 0

    def __call__(self, event: KVCacheEvent) -> None:
        self._pending.append(event)

    def publish(self) -> int | None:
        """Send the events heard since the last publish as one batch; its sequence number
        (``None``, and nothing sent, when there were none)."""
        if not self._pending:
            return None
        batch = KVEventBatch(self._clock(), self._pending)
        self._pending = []
        seq = self.next_seq
        self._socket.send_multipart(
            [self.topic, seq.to_bytes(SEQ_BYTES, "big"), encode_batch(batch)]
        )
        self.next_seq += 1
        self.events_sent += len(batch.events)
        return seq

    def wait_for_subscribers(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` subscriptions arrived (at most ``timeout`` seconds)."""
        # A socket wait, not recency: the caches' clocks stay logical (SPEC.md).
        deadline = time.monotonic() + timeout
        while self.subscribers < count:
            left = deadline - time.monotonic()
            if left <= 0 or not self._socket.poll(int(left * 1000), zmq.POLLIN):
                return False
            message = self._socket.recv()
            if message[:1] == b"\x01":  # XPUB: 1 = subscribe, 0 = unsubscribe
                self.subscribers += 1
        return True

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> ZmqEventPublisher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def parse_seq(frame: bytes) -> int:
    """A batch's sequence number from its frame."""
    if len(frame) != SEQ_BYTES:
        raise ValueError(f"a sequence frame has {SEQ_BYTES} bytes, got {len(frame)}")
    return int.from_bytes(frame, "big")
