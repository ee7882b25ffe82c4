"""NVIDIA Dynamo's own KV router, fed by three radixkv workers over ZeroMQ — by hand, not in CI.

    tox -e interop        (installs ai-dynamo-runtime==1.6.1 beside radixkv's test extra)

Three ``RadixCache(page_size=16)`` workers each publish their stream with radixkv's
``ZmqEventPublisher`` on 127.0.0.1. Each is registered with a Dynamo runtime of its own
(file discovery in a temporary folder, TCP request plane, ZeroMQ event plane, every host
pinned to 127.0.0.1), and Dynamo's ``KvEventPublisher(..., zmq_endpoint=)`` subscribes to
it: Dynamo decodes radixkv's batches itself and re-hashes every page from its tokens and
``cache_salt``. Dynamo's ``KvRouter`` then answers, for each prompt, which worker holds the
longest prefix and how many 16-token blocks of it (``get_overlap_scores`` per worker,
``best_worker`` for the choice). The truth is each worker's own ``match_prefix``.

Four phases — fill, evict on one worker, reset another, re-insert — in two namespaces
(``None`` and ``"tenant-b"``; ``cache_salt`` on the wire), plus pages in the ``""``
namespace that radixkv must keep out of the stream (a router reads ``""`` as no salt, so
they would be credited to ``None``'s prompts). Skips, saying why, without Dynamo.
``-s`` prints the table: phase, prompt, router's choice and overlaps, truth.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from radixkv import RadixCache, RadixKey

pytest.importorskip("zmq")
pytest.importorskip("msgspec")
dynamo = pytest.importorskip(
    "dynamo._core",
    reason="NVIDIA Dynamo is not installed: tox -e interop (pip install ai-dynamo-runtime==1.6.1)",
)

from radixkv.events.publisher import ZmqEventPublisher  # noqa: E402  # needs pyzmq

PAGE = 16
ENDPOINT = "radixkv.worker.generate"
MODEL = "radixkv-interop"
SETTLE_S = 15.0  # how long the router may take to reflect a published batch
# Dynamo's runtimes bind the machine's interface unless these say otherwise
LOOPBACK_VARIABLES = (
    "DYN_TCP_RPC_HOST",
    "DYN_EVENT_PLANE_HOST",
    "DYN_SYSTEM_HOST",
    "DYN_TCP_RESPONSE_STREAM_HOST",
)

Namespace = str | None


def tokens(*runs: tuple[int, int]) -> list[int]:
    """Concatenated token ranges: (start, length) each."""
    return [t for start, length in runs for t in range(start, start + length)]


SYSTEM = (1000, 48)  # 3 pages every prompt shares
PROMPTS: dict[str, list[int]] = {
    "p1 system+a": tokens(SYSTEM, (2000, 32)),
    "p2 system+b": tokens(SYSTEM, (3000, 64)),
    "p3 system+c": tokens(SYSTEM, (4000, 16)),
    "p4 system+a+more": tokens(SYSTEM, (2000, 32), (5000, 32)),
    "p5 other": tokens((6000, 80)),
    "p6 system only": tokens(SYSTEM, (7000, 8)),
    "p7 unseen": tokens((9000, 64)),
}
NAMESPACES: tuple[Namespace, ...] = (None, "tenant-b")


@dataclass
class Worker:
    """One radixkv cache, its ZeroMQ publisher, and the id Dynamo knows it by."""

    name: str
    cache: RadixCache
    publisher: ZmqEventPublisher
    dynamo_id: int = 0

    def run(self, step: Any) -> None:
        step(self.cache)
        self.publisher.publish()

    def blocks(self, prompt: list[int], namespace: Namespace) -> int:
        return self.cache.match_prefix(RadixKey(prompt, namespace)).prefix_len // PAGE


@dataclass
class Row:
    phase: str
    prompt: str
    namespace: Namespace
    truth: dict[str, int]
    router: dict[str, int]
    choice: str
    choice_overlap: int


async def _handler(request: Any) -> Any:
    yield {"token_ids": []}  # never called: the test asks the router only where it would route


class Cluster:
    """Three workers, each with its own Dynamo runtime, and a router with a runtime of its own."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self._serving: list[asyncio.Future[Any]] = []
        self._relays: list[Any] = []
        self._runtimes: list[Any] = []
        self.router: Any = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for worker in self.workers:
            runtime = self._runtime(loop)
            endpoint = runtime.endpoint(ENDPOINT)
            self._serving.append(asyncio.ensure_future(endpoint.serve_endpoint(_handler)))
            await dynamo.register_model(
                dynamo.ModelInput.Tokens,
                dynamo.ModelType.Completions,
                endpoint,
                MODEL,
                MODEL,
                worker_type=dynamo.WorkerType.Aggregated,
                kv_cache_block_size=PAGE,
                skip_model_assets=True,
            )
            worker.dynamo_id = endpoint.connection_id()
            self._relays.append(
                dynamo.KvEventPublisher(
                    endpoint, kv_block_size=PAGE, zmq_endpoint=worker.publisher.endpoint
                )
            )
            assert worker.publisher.wait_for_subscribers(1, timeout=10.0), (
                f"Dynamo's KvEventPublisher never subscribed to {worker.publisher.endpoint}"
            )
        runtime = self._runtime(loop)
        self.router = dynamo.KvRouter(runtime.endpoint(ENDPOINT), PAGE, dynamo.KvRouterConfig())
        await self._wait_for_workers()

    def _runtime(self, loop: asyncio.AbstractEventLoop) -> Any:
        runtime = dynamo.DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
        self._runtimes.append(runtime)
        return runtime

    async def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + SETTLE_S
        while len(await self.overlaps([0] * PAGE, None)) < len(self.workers):
            assert time.monotonic() < deadline, "Dynamo's router never saw the three workers"
            await asyncio.sleep(0.2)

    async def overlaps(self, prompt: list[int], namespace: Namespace) -> dict[str, int]:
        """The router's overlap in blocks for every worker it knows, by worker name."""
        answer = await self.router.get_overlap_scores(prompt, cache_namespace=namespace)
        names = {w.dynamo_id: w.name for w in self.workers}
        return {names[row["worker_id"]]: row["device_blocks"] for row in answer["workers"]}

    async def best(self, prompt: list[int], namespace: Namespace) -> tuple[str, int]:
        worker_id, _rank, overlap = await self.router.best_worker(prompt, cache_namespace=namespace)
        return {w.dynamo_id: w.name for w in self.workers}[worker_id], overlap

    async def settled(self, prompt: list[int], namespace: Namespace) -> dict[str, int]:
        """The router's overlaps once they equal the truth, or the last ones at the deadline.

        Events travel asynchronously (radixkv → Dynamo's relay → its event plane → the
        router's indexer), so the router may lag a published batch by a few milliseconds.
        """
        truth = {w.name: w.blocks(prompt, namespace) for w in self.workers}
        deadline = time.monotonic() + SETTLE_S
        seen = await self.overlaps(prompt, namespace)
        while seen != truth and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            seen = await self.overlaps(prompt, namespace)
        return seen

    def stop(self) -> None:
        for relay in self._relays:
            relay.shutdown()
        for future in self._serving:
            future.cancel()
        for runtime in self._runtimes:
            runtime.shutdown()
        for worker in self.workers:
            worker.publisher.close()


@pytest.fixture
def loopback_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in LOOPBACK_VARIABLES:
        monkeypatch.setenv(variable, "127.0.0.1")
    monkeypatch.setenv("DYN_FILE_KV", str(tmp_path / "discovery"))  # no stale instances
    yield


def make_workers() -> list[Worker]:
    workers = []
    for name in ("w0", "w1", "w2"):
        publisher = ZmqEventPublisher("tcp://127.0.0.1:*")
        workers.append(Worker(name, RadixCache(PAGE, event_listener=publisher), publisher))
    return workers


def insert(prompt: str, namespace: Namespace) -> Any:
    return lambda cache: cache.insert(RadixKey(PROMPTS[prompt], namespace))


def phases(w0: Worker, w1: Worker, w2: Worker) -> Iterator[str]:
    """Drive the workers; yield each phase's name once its batches are published."""
    for namespace in NAMESPACES:
        w0.run(insert("p1 system+a", namespace))
        w0.run(insert("p4 system+a+more", namespace))
        w1.run(insert("p2 system+b", namespace))
        w2.run(insert("p3 system+c", namespace))
        w2.run(insert("p5 other", namespace))
    w1.run(insert("p5 other", ""))  # must not reach the router: "" reads as None there
    w1.run(insert("p4 system+a+more", ""))
    yield "fill"
    w0.run(lambda cache: cache.evict(3 * PAGE))  # the two LRU leaves: p1's and p4's tails
    yield "evict w0"
    w2.run(lambda cache: cache.reset())
    yield "reset w2"
    w2.run(insert("p4 system+a+more", None))
    w2.run(insert("p5 other", "tenant-b"))
    yield "re-insert w2"


async def route_all(cluster: Cluster) -> list[Row]:
    rows = []
    for phase in phases(*cluster.workers):
        for namespace in NAMESPACES:
            for prompt, ids in PROMPTS.items():
                router = await cluster.settled(ids, namespace)
                truth = {w.name: w.blocks(ids, namespace) for w in cluster.workers}
                choice, overlap = await cluster.best(ids, namespace)
                rows.append(Row(phase, prompt, namespace, truth, router, choice, overlap))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| phase | namespace | prompt | router's choice (overlap) | router w0/w1/w2 "
        "| truth w0/w1/w2 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        router = "/".join(str(r.router.get(n, "-")) for n in ("w0", "w1", "w2"))
        truth = "/".join(str(r.truth[n]) for n in ("w0", "w1", "w2"))
        lines.append(
            f"| {r.phase} | {r.namespace!r} | {r.prompt} | {r.choice} ({r.choice_overlap}) "
            f"| {router} | {truth} |"
        )
    return "\n".join(lines)


def test_dynamo_routes_by_radixkv_events(loopback_only: None) -> None:
    async def scenario() -> list[Row]:
        cluster = Cluster(make_workers())
        try:
            await cluster.start()
            return await route_all(cluster)
        finally:
            cluster.stop()

    rows = asyncio.run(scenario())
    print("\n" + table(rows))
    wrong = [r for r in rows if r.router != r.truth]
    assert not wrong, "router's overlaps differ from match_prefix:\n" + table(wrong)
    for r in rows:
        best = max(r.truth.values())
        assert r.choice_overlap == best and r.truth[r.choice] == best, (
            f"{r.phase} {r.prompt} {r.namespace!r}: the router chose {r.choice} with "
            f"{r.choice_overlap} blocks; the most any worker holds is {best} ({r.truth})"
        )
    # the scenario exercised what it claims: every phase changed some answer
    names = list(dict.fromkeys(r.phase for r in rows))
    answers = [[r.truth for r in rows if r.phase == phase] for phase in names]
    assert all(a != b for a, b in itertools.pairwise(answers)), names
