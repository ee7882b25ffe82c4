"""Publish a cache's KV events over ZeroMQ, in the frames vLLM's and sglang's routers read.

Every batch is one multipart message: the topic, the batch's sequence number as 8 bytes
big-endian (0, 1, 2, ... per publisher), and the msgpack payload
``[ts, records, data_parallel_rank]`` (``radixkv.events.wire``). What is sent has passed a
``RouterFilter``: pages a router cannot be told faithfully are left out, never sent to
poison a batch. A subscriber that sees a number jump missed batches (``SequenceTracker``).

With ``replay_endpoint`` the publisher also binds a ROUTER socket that speaks vLLM 0.33's
replay protocol: a subscriber (a DEALER, or REQ-like client) sends an empty frame and the
first sequence number it lacks (8 bytes big-endian); the publisher answers with every
buffered batch from there on, each as (empty, topic, seq, payload), then the end marker
(empty, empty, -1 as 8 signed bytes, empty). Where the buffer no longer holds the first
batch asked for, the answer is a snapshot instead: one batch numbered with the latest
sequence number that clears and re-stores every page the stream has published and not
removed, so the subscriber resynchronises anyway. Requests are served in ``publish`` and in
``serve_replay`` (no thread: call it from the engine's loop when idle).

The event socket is an XPUB: it behaves as a PUB socket for subscribers and lets
``wait_for_subscribers`` see them arrive, so a replay does not publish into the void while a
subscriber is still connecting. Needs ``pyzmq`` and ``msgspec`` (the ``events`` extra).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from radixkv.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    KVEventBatch,
    RouterFilter,
    extra_missing,
)
from radixkv.events.wire import encode_batch  # needs msgspec, and says so

try:
    import zmq
except ImportError as missing:  # the events extra is optional: say how to get it
    raise extra_missing(__name__, "pyzmq", missing) from missing

SEQ_BYTES = 8
END_SEQ = (-1).to_bytes(SEQ_BYTES, "big", signed=True)
"""The sequence frame of the replay's end marker (vLLM's)."""


class ZmqEventPublisher:
    """An event listener for a cache that sends what it heard, one batch per ``publish``.

    Pass it as a cache's ``event_listener``; call ``publish`` after each scheduler step.
    ``endpoint`` is bound (``tcp://127.0.0.1:*`` picks a free port: read ``endpoint``).
    ``data_parallel_rank`` is the third field of every batch (vLLM's; 0 by default).
    ``replay_endpoint`` (also bound; read ``replay_endpoint`` after) turns on replay of
    the last ``buffer_steps`` batches and snapshots. Sending never blocks the caller:
    ZeroMQ queues, and drops for a slow subscriber past its high-water mark — which the
    sequence numbers reveal.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        topic: str = "",
        clock: Callable[[], float] = time.time,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        data_parallel_rank: int = 0,
        replay_endpoint: str | None = None,
        buffer_steps: int = 10_000,
    ) -> None:
        if type(data_parallel_rank) is not int or data_parallel_rank < 0:
            raise ValueError(f"data_parallel_rank must be an int >= 0, got {data_parallel_rank!r}")
        if buffer_steps < 0:
            raise ValueError(f"buffer_steps must be >= 0, got {buffer_steps}")
        self._context = context if context is not None else zmq.Context.instance()
        self._socket = self._context.socket(zmq.XPUB)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.bind(endpoint)
        self.endpoint = _bound(self._socket, endpoint)
        self.topic = topic.encode()
        self.data_parallel_rank = data_parallel_rank
        self._clock = clock
        self._pending: list[KVCacheEvent] = []
        self.filter = RouterFilter()
        self.next_seq = 0
        self.events_sent = 0
        self.subscribers = 0
        self._replay: zmq.Socket[bytes] | None = None
        self.replay_endpoint: str | None = None
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._published: dict[int, BlockStored] = {}  # page -> its one-page record
        if replay_endpoint is not None:
            self._replay = self._context.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 1000)
            self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))
            self._replay.bind(replay_endpoint)
            self.replay_endpoint = _bound(self._replay, replay_endpoint)

    @property
    def refused_pages(self) -> int:
        """Pages kept out of the stream so far (``RouterFilter``)."""
        return self.filter.refused_pages

    def __call__(self, event: KVCacheEvent) -> None:
        self._pending.append(event)

    def publish(self) -> int | None:
        """Send the events heard since the last publish as one batch; its sequence number
        (``None``, and nothing sent, when nothing publishable was heard)."""
        self.serve_replay()
        heard, self._pending = self._pending, []
        events = [sent for sent in map(self.filter, heard) if sent is not None]
        if not events:
            return None
        seq = self.next_seq
        payload = encode_batch(KVEventBatch(self._clock(), events, self.data_parallel_rank))
        self._socket.send_multipart([self.topic, seq.to_bytes(SEQ_BYTES, "big"), payload])
        self.next_seq += 1
        self.events_sent += len(events)
        if self._replay is not None:
            self._buffer.append((seq, payload))
            for event in events:
                self._mirror(event)
        return seq

    def serve_replay(self, timeout: float = 0.0) -> int:
        """Answer the replay requests waiting (the first may be awaited ``timeout`` seconds);
        how many were answered. Without a replay endpoint, 0."""
        if self._replay is None:
            return 0
        served = 0
        wait = int(timeout * 1000)
        while self._replay.poll(wait, zmq.POLLIN):
            wait = 0
            frames = self._replay.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != SEQ_BYTES:
                continue  # not a request (vLLM ignores these too)
            client, start = frames[0], int.from_bytes(frames[2], "big")
            for seq, payload in self._replay_from(start):
                self._replay.send_multipart(
                    [client, b"", self.topic, seq.to_bytes(SEQ_BYTES, "big"), payload]
                )
            self._replay.send_multipart([client, b"", b"", END_SEQ, b""])
            served += 1
        return served

    def _replay_from(self, start: int) -> list[tuple[int, bytes]]:
        if start >= self.next_seq:
            return []
        if self._buffer and self._buffer[0][0] <= start:
            return [(seq, payload) for seq, payload in self._buffer if seq >= start]
        return [(self.next_seq - 1, self.snapshot())]

    def snapshot(self) -> bytes:
        """A batch payload that clears and re-stores every page published and not removed
        (parents first); needs a replay endpoint (only then are pages remembered)."""
        events: list[KVCacheEvent] = [AllBlocksCleared(), *self._published.values()]
        return encode_batch(KVEventBatch(self._clock(), events, self.data_parallel_rank))

    def _mirror(self, event: KVCacheEvent) -> None:
        if isinstance(event, BlockStored):
            p, parent = event.block_size, event.parent_block_hash
            for i, page in enumerate(event.block_hashes):
                tokens = event.token_ids[i * p : (i + 1) * p]
                self._published[page] = BlockStored(
                    [page], parent, tokens, p, event.lora_id, event.medium, event.extra_key
                )
                parent = page
        elif isinstance(event, BlockRemoved):
            for page in event.block_hashes:
                self._published.pop(page, None)
        else:
            self._published.clear()

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
        if self._replay is not None:
            self._replay.close()

    def __enter__(self) -> ZmqEventPublisher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _bound(socket: zmq.Socket[bytes], endpoint: str) -> str:
    last = socket.getsockopt(zmq.LAST_ENDPOINT)
    return last.decode() if isinstance(last, bytes) else endpoint


def parse_seq(frame: bytes) -> int:
    """A batch's sequence number from its frame."""
    if len(frame) != SEQ_BYTES:
        raise ValueError(f"a sequence frame has {SEQ_BYTES} bytes, got {len(frame)}")
    return int.from_bytes(frame, "big")
