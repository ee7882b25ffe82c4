"""Deterministic, seeded request traces for replaying a prefix cache (``radixkv drive``).

A trace mixes the request shapes that make prefix caching pay: multi-turn chats sharing a
few long system prompts, few-shot prompts sharing examples, tree-of-thought branching,
unique long prompts, and chats under ``extra_key`` namespaces (the same system prompts, which
must never be shared across namespaces). Token ids come from a 2**17 (128k) vocabulary.

The same seed gives the same trace on any machine and Python >= 3.9: all randomness comes
from one ``random.Random(seed)`` (``randbytes``, ``random``, ``randrange``), never ``hash()``
or set order, and byte order is fixed. ``trace_digest`` is the SHA-256 of a trace.
Requests are generated lazily, so a 20 000-request trace never sits in memory at once.
"""

from __future__ import annotations

import hashlib
import random
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

VOCAB = 2**17  # 131 072 token ids
KINDS = ("chat", "fewshot", "tot", "unique", "namespaced")
_WEIGHTS = (0.35, 0.2, 0.15, 0.15, 0.15)
_NAMESPACES = ("lora-a", "lora-b", "tenant-c")


@dataclass(frozen=True)
class Request:
    """One request: its prompt, the tokens it generates, and its namespace."""

    kind: str
    prompt: list[int]
    output: list[int]
    extra_key: str | None = None

    def full(self) -> list[int]:
        """What the finished request inserts: prompt plus generated tokens."""
        return self.prompt + self.output


@dataclass
class WorkloadConfig:
    seed: int = 0
    requests: int = 2000
    prompt_len: int = 2048  # the typical prompt length; prompts vary around it
    system_prompts: int = 4
    fewshot_tasks: int = 6
    tot_problems: int = 6


def _tokens(rng: random.Random, n: int) -> list[int]:
    """``n`` uniform token ids, drawn at C speed from ``rng``'s byte stream."""
    raw = array("I", rng.randbytes(4 * n))
    if sys.byteorder == "big":
        raw.byteswap()
    return list(map((32 - 17).__rrshift__, raw))


@dataclass
class _Session:
    history: list[int]
    extra_key: str | None
    turns: int = 0


@dataclass
class _Generator:
    cfg: WorkloadConfig
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        cfg, rng = self.cfg, random.Random(self.cfg.seed)
        self.rng = rng
        length = cfg.prompt_len
        self.system = [_tokens(rng, length // 2) for _ in range(cfg.system_prompts)]
        self.fewshot = [
            (_tokens(rng, length // 8), [_tokens(rng, length // 16) for _ in range(14)])
            for _ in range(cfg.fewshot_tasks)
        ]
        self.problems = [[_tokens(rng, length // 2)] for _ in range(cfg.tot_problems)]
        self.sessions: dict[str, list[_Session]] = {"chat": [], "namespaced": []}

    def _len(self, mean: int) -> int:
        return max(1, int(mean * (0.5 + self.rng.random())))

    def _output(self) -> list[int]:
        return _tokens(self.rng, self._len(max(1, self.cfg.prompt_len // 16)))

    def request(self) -> Request:
        rng, length = self.rng, self.cfg.prompt_len
        kind = rng.choices(KINDS, _WEIGHTS)[0]
        if kind in ("chat", "namespaced"):
            return self._chat(kind)
        if kind == "fewshot":
            header, examples = self.fewshot[rng.randrange(len(self.fewshot))]
            k = rng.randrange(4, len(examples) + 1)
            prompt = header + [t for ex in examples[:k] for t in ex]
            prompt += _tokens(rng, max(1, length - len(prompt)))
            return Request(kind, prompt, self._output())
        if kind == "tot":
            branches = self.problems[rng.randrange(len(self.problems))]
            base = branches[rng.randrange(len(branches))]
            if len(base) > length * 3 // 2:
                base = branches[0]
            prompt = base + _tokens(rng, self._len(length // 16))
            if len(branches) < 64:
                branches.append(prompt)
            return Request(kind, prompt, self._output())
        return Request(kind, _tokens(rng, self._len(length)), self._output())

    def _chat(self, kind: str) -> Request:
        rng, length = self.rng, self.cfg.prompt_len
        live = self.sessions[kind]
        if live and rng.random() < 0.75:
            session = live[rng.randrange(len(live))]
        else:
            extra = _NAMESPACES[rng.randrange(len(_NAMESPACES))] if kind == "namespaced" else None
            session = _Session(list(self.system[rng.randrange(len(self.system))]), extra)
            live.append(session)
            if len(live) > 48:
                live.pop(0)
        prompt = session.history + _tokens(rng, self._len(length // 8))
        output = self._output()
        session.turns += 1
        if len(prompt) + len(output) > length * 3 // 2 or session.turns >= 8:
            live.remove(session)
        else:
            session.history = prompt + output
        return Request(kind, prompt, output, session.extra_key)


def generate(cfg: WorkloadConfig) -> Iterator[Request]:
    """The trace of ``cfg``, one request at a time (deterministic in ``cfg.seed``)."""
    gen = _Generator(cfg)
    for _ in range(cfg.requests):
        yield gen.request()


def request_bytes(request: Request) -> bytes:
    """A canonical byte encoding of a request (little-endian int64 tokens)."""
    head = f"{request.kind}|{request.extra_key!r}|{len(request.prompt)}|{len(request.output)}|"
    body = array("q", request.prompt)
    body.extend(request.output)
    if sys.byteorder == "big":
        body.byteswap()
    return head.encode() + body.tobytes()


def trace_digest(cfg: WorkloadConfig) -> str:
    """SHA-256 (hex) of the whole trace of ``cfg``: equal seeds give equal digests."""
    h = hashlib.sha256()
    for request in generate(cfg):
        h.update(request_bytes(request))
    return h.hexdigest()
