"""KV events over ZeroMQ on loopback, to a subscriber in another process.

The subscriber (``tests/events/event_subscriber.py``) imports neither radixkv nor its spec: it
decodes with its own schema and recomputes every hash with hashlib. The cache here serves a
seeded trace on a small pool — so it evicts — and resets twice; after every batch the
subscriber's page set must be exactly the cache's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from radixkv_spec.events import EventStreamModel, expected_page_set

from radixkv import KVIndexAllocator, RadixCache, RadixKey
from radixkv.driver.workload import WorkloadConfig, generate
from radixkv.events import SequenceTracker
from tests.events.test_events import tree_positions

zmq = pytest.importorskip("zmq")
pytest.importorskip("msgspec")

from radixkv.events.publisher import ZmqEventPublisher, parse_seq  # noqa: E402  # needs zmq
from radixkv.events.wire import decode_batch  # noqa: E402  # needs msgspec

ROOT = Path(__file__).resolve().parents[2]


def start_subscriber(endpoint: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.events.event_subscriber", endpoint],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.communicate()
        pytest.fail("the subscriber process did not start")
    return proc


def finish_subscriber(proc: subprocess.Popen[str], last_seq: int) -> dict[str, Any]:
    out, _ = proc.communicate(f"end {last_seq}\n", timeout=120)
    assert proc.returncode == 0
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def digest(pages: frozenset[int]) -> str:
    return hashlib.sha256(json.dumps(sorted(pages)).encode()).hexdigest()


def test_a_subscriber_in_another_process_rebuilds_the_page_set_after_every_batch() -> None:
    page_size = 4
    with ZmqEventPublisher("tcp://127.0.0.1:*") as publisher:
        subscriber = start_subscriber(publisher.endpoint)
        try:
            assert publisher.wait_for_subscribers(1, timeout=60)
            pool = KVIndexAllocator(1200)
            cache = RadixCache(page_size, token_to_kv_pool_allocator=pool, event_listener=publisher)
            expected: dict[str, str] = {}
            trace = list(generate(WorkloadConfig(seed=3, requests=120, prompt_len=96)))
            for n, request in enumerate(trace, 1):
                tokens = request.full()
                key = RadixKey(tokens, request.extra_key)
                matched = cache.match_prefix(key).prefix_len
                short = len(tokens) - pool.available_size()
                if short > 0:
                    cache.evict(short)
                value = pool.alloc(len(tokens))
                assert value is not None
                prefix_len = cache.insert(key, value).prefix_len
                aligned = len(tokens) // page_size * page_size
                pool.free(torch.cat([value[:prefix_len], value[aligned:]]))
                if n in (50, 100):
                    cache.reset()
                seq = publisher.publish()
                if seq is not None:
                    pages = expected_page_set(tree_positions(cache), page_size)
                    expected[str(seq)] = digest(pages)
                assert matched <= len(tokens)
            last = publisher.next_seq - 1
            result = finish_subscriber(subscriber, last)
        finally:
            if subscriber.poll() is None:
                subscriber.kill()
    assert result["errors"] == []
    assert result["gaps"] == [] and result["first"] == 0
    assert result["batches"] == publisher.next_seq == len(expected)
    assert result["after"] == expected  # the page set agrees after every single batch
    final = expected_page_set(tree_positions(cache), page_size)
    assert frozenset(result["pages"]) == final and final
    counts = result["counts"]
    assert counts["AllBlocksCleared"] == 2
    assert counts["BlockRemoved"] > 10  # the pool is small: it evicted
    assert sum(counts.values()) == publisher.events_sent > 100


def test_replay_events_cli_publishes_a_whole_replay() -> None:
    """``radixkv drive --events``: the replay evicts everything at the end, so the stream
    must rebuild to an empty page set, with every stored page removed again."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("src", "spec", "stateful", ".")),
    }
    command = [
        sys.executable, "-m", "radixkv_conformance.cli", "drive", "--requests", "40",
        "--prompt-len", "64", "--page-size", "2", "--pool-size", "800", "--batch", "4",
        "--events", "tcp://127.0.0.1:*", "--events-wait", "60", "--no-progress",
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env) as replay:
        try:
            assert replay.stdout is not None
            lines = [replay.stdout.readline() for _ in range(3)]
            assert lines[-1].startswith("events: publishing on tcp://127.0.0.1:"), lines
            subscriber = start_subscriber(lines[-1].split()[-1])
            out, _ = replay.communicate(timeout=120)
        finally:
            if replay.poll() is None:
                replay.kill()
    assert replay.returncode == 0, out
    sent = next(line for line in out.splitlines() if line.startswith("events: ") and " in " in line)
    events, batches = int(sent.split()[1]), int(sent.split()[3])
    result = finish_subscriber(subscriber, batches - 1)
    assert result["errors"] == [] and result["gaps"] == []
    assert result["batches"] == batches and sum(result["counts"].values()) == events
    assert result["pages"] == []  # everything was evicted at the end of the replay
    assert result["pages_stored"] > 0


def test_publisher_frames_and_the_spec_reads_them() -> None:
    """In-process: frames are (topic, 8-byte sequence, payload); the payload decodes to the
    plain form the spec's router model applies."""
    context = zmq.Context()
    with ZmqEventPublisher("inproc://events", topic="w0", context=context) as publisher:
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"w0")
        sub.connect("inproc://events")
        assert publisher.wait_for_subscribers(1, timeout=10)
        assert publisher.publish() is None  # nothing heard: nothing sent
        cache = RadixCache(2, event_listener=publisher)
        cache.insert(RadixKey([1, 2, 3, 4], "ns"))
        assert publisher.publish() == 0
        cache.evict(2)
        cache.reset()
        assert publisher.publish() == 1
        model, tracker = EventStreamModel(2), SequenceTracker()
        for expected_seq in (0, 1):
            topic, seq, payload = sub.recv_multipart()
            assert topic == b"w0" and tracker.see(parse_seq(seq)) == range(0)
            assert parse_seq(seq) == expected_seq
            model.apply_batch(decode_batch(payload))
            if expected_seq == 0:
                assert model.positions() == {("ns", (1, 2)), ("ns", (1, 2, 3, 4))}
        assert model.page_set() == frozenset() and model.records == 3
        sub.close()
    context.term()


def test_sequence_tracker_reports_gaps() -> None:
    tracker = SequenceTracker()
    assert tracker.see(5) == range(0)  # a late joiner starts where it starts
    assert tracker.see(6) == range(0)
    assert tracker.see(9) == range(7, 9)
    assert tracker.gaps == [range(7, 9)]
    with pytest.raises(ValueError, match="went back"):
        tracker.see(9)
    with pytest.raises(ValueError, match="8 bytes"):
        parse_seq(b"\x00")


def test_decode_rejects_what_is_not_a_batch() -> None:
    import msgspec

    with pytest.raises(ValueError, match="not a KV event batch"):
        decode_batch(msgspec.msgpack.encode({"ts": 1}))
