"""The KV event stream a router consumes, as a pure model (SPEC.md, "KV events").

A router keeps, per worker, the set of page hashes the worker holds. It applies the
worker's records in order: ``BlockStored`` adds pages, ``BlockRemoved`` takes them away,
``AllBlocksCleared`` empties the set. The stream is only useful if that set is exactly the
worker's cached pages and every hash is one the router can recompute from the tokens and
the namespace. ``EventStreamModel`` applies a stream and raises ``SpecViolation`` where it
breaks a rule:

* INV-40 a stored page was not stored already (since its last removal or a clear), its
  parent is stored (or absent for a namespace's first page), and the record is whole
  pages of the stream's page size;
* INV-41 a removed page is stored;
* INV-42 each stored hash is ``hash_to_int64`` of the spec's page hash (§9) of its
  namespace and root path, chained from the parent page;
* INV-43 (checked by the caller, e.g. the kit): after every operation, the rebuilt
  positions equal the cache's; for the stream a router receives after the engine's filter,
  the cache's less the pages a router is not told (``router_told``, ``told_positions``).

Records come in their wire form, decoded by field name: a map tagged ``type`` (what vLLM
0.33, sglang 0.5.23 and radixkv send), or a tagged array — the tag, then the fields in the
order of a layout (``parse_record``). A batch is ``[ts, records]`` or
``[ts, records, data_parallel_rank]``. Integer hashes are 64-bit patterns, compared as
unsigned (as Dynamo reads them: ``-1`` and ``2**64 - 1`` name the same page); another
engine's hashes may be bytes (vLLM's default). Standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from radixkv_spec.hashing import hash_to_int64, hash_token_ids, namespace_seed, page_hashes
from radixkv_spec.invariants import holds
from radixkv_spec.tokens import Namespace, PagePath, Token

STORED, REMOVED, CLEARED = "BlockStored", "BlockRemoved", "AllBlocksCleared"
TAG = "type"
"""The key naming a record's class in a wire map (msgspec's ``tag=True``)."""
BlockHash = int | bytes
"""A published page name: an int read as unsigned 64-bit, or an engine's opaque bytes."""
HashPolicy = Literal["radixkv", "opaque"]
"""``radixkv``: hashes are SPEC.md §9's (INV-42 checked; namespaces come from the records).
``opaque``: another engine's own hashes, checked only as names (INV-40, 41, 43); the stream
then knows each page's token path through the parent links but not its namespace."""
Layout = Literal["sglang", "vllm"]
"""Where a ``BlockStored`` keeps what the kit reads, in an array and when a map omits it.

``sglang`` (sglang 0.5.23; radixkv's arrays before 2026-11-27): fields in the order
block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, cache_salt,
session_id, lora_name; the namespace is ``cache_salt`` (absent: ``None``).
``vllm`` (vLLM 0.33): block_hashes, parent_block_hash, token_ids, block_size, lora_id,
medium, lora_name, extra_keys, then metadata the kit ignores; the slot after medium is the
LoRA name, never the namespace. The namespace is ``cache_salt`` where a record carries it
(Dynamo reads that field; radixkv sends it); otherwise vLLM's own form: the bare string of
the first block's ``extra_keys`` entry other than the LoRA name, on a record that starts a
path; a record continuing a parent has the parent's namespace (vLLM salts only block 0)."""

_STORED_HEAD = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
"""The fields both layouts of a stored record begin with, in order."""
_FIELDS: dict[str, dict[Layout, tuple[str, ...]]] = {
    STORED: {
        "sglang": (*_STORED_HEAD, "cache_salt", "session_id", "lora_name"),
        "vllm": (*_STORED_HEAD, "lora_name", "extra_keys"),
    },
    REMOVED: {"sglang": ("block_hashes", "medium"), "vllm": ("block_hashes", "medium")},
    CLEARED: {"sglang": (), "vllm": ()},
}
_REQUIRED = {STORED: 4, REMOVED: 1, CLEARED: 0}  # leading fields an array must have
_LAYOUTS = ("sglang", "vllm")


@dataclass(frozen=True)
class StoredPage:
    """What the router knows about one stored page: its hash chain and where it ends."""

    digest: str | None  # the full SHA-256 hex (the next page's prior); None: opaque hashes
    namespace: Namespace
    path: PagePath  # every token from the namespace's root to the page's end


@dataclass(frozen=True)
class Stored:
    """``inherits``: the record names no namespace and continues its parent's (vLLM)."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[Token, ...]
    block_size: int
    extra_key: Namespace = None
    lora_name: str | None = None
    inherits: bool = False


@dataclass(frozen=True)
class Removed:
    block_hashes: tuple[BlockHash, ...]


@dataclass(frozen=True)
class Cleared:
    pass


Record = Stored | Removed | Cleared


def parse_record(
    record: Sequence[object] | Mapping[str, object], layout: Layout = "sglang"
) -> Record:
    """A record in its wire form, read by field name.

    A map: its ``type`` names the record, its other keys are fields (unknown ones ignored,
    optional ones may be absent). An array: the tag, then the fields in ``layout``'s order
    (trailing ones may be left out; fields past the layout's are ignored for
    ``BlockStored``). ``BlockStored`` needs block_hashes, token_ids and block_size;
    ``BlockRemoved`` block_hashes. Raises ``ValueError`` for a record that is not one of
    them.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'sglang' or 'vllm', got {layout!r}")
    fields = _fields(record, layout)
    tag = fields.pop(TAG)
    if tag == STORED:
        for name in ("block_hashes", "token_ids", "block_size"):
            if name not in fields:
                raise ValueError(f"a BlockStored without {name}: {record!r}")
        parent = fields.get("parent_block_hash")
        lora_name = _optional_str(fields.get("lora_name"), "lora_name")
        namespace, inherits = _namespace(fields, parent is not None, lora_name, layout)
        return Stored(
            _hash_tuple(fields["block_hashes"]),
            None if parent is None else _hash(parent),
            tuple(_token(t) for t in _seq(fields["token_ids"])),
            _int(fields["block_size"]),
            namespace,
            lora_name,
            inherits,
        )
    if tag == REMOVED:
        if "block_hashes" not in fields:
            raise ValueError(f"a BlockRemoved without block_hashes: {record!r}")
        return Removed(_hash_tuple(fields["block_hashes"]))
    return Cleared()


def _fields(record: Sequence[object] | Mapping[str, object], layout: Layout) -> dict[str, object]:
    """The record as a map of its fields, with its tag under ``type``."""
    if isinstance(record, Mapping):
        tag = record.get(TAG)
        if tag not in _FIELDS:
            raise ValueError(f"not a known tagged record: {record!r}")
        return dict(record)
    if isinstance(record, str | bytes) or not isinstance(record, Sequence):
        raise ValueError(f"not a record: {record!r}")
    if not record or record[0] not in _FIELDS:
        raise ValueError(f"not a known tagged record: {record!r}")
    tag, values = record[0], list(record[1:])
    assert isinstance(tag, str)
    names = _FIELDS[tag][layout]
    too_many = len(values) > len(names) and tag != STORED
    if len(values) < _REQUIRED[tag] or too_many:
        raise ValueError(f"{tag} with {len(values)} fields: {record!r}")
    return {TAG: tag, **dict(zip(names, values, strict=False))}


def _namespace(
    fields: Mapping[str, object], has_parent: bool, lora_name: str | None, layout: Layout
) -> tuple[Namespace, bool]:
    """The record's namespace, and whether it is its parent's instead (``inherits``)."""
    if "cache_salt" in fields:
        return _optional_str(fields["cache_salt"], "cache_salt"), False
    if layout == "sglang":
        return None, False
    if has_parent:
        return None, True
    keys = fields.get("extra_keys")
    if keys is None:
        return None, False
    first = _seq(keys)[0] if _seq(keys) else None
    names = [k for k in ([] if first is None else _seq(first)) if isinstance(k, str)]
    if lora_name is not None and names[:1] == [lora_name]:
        names = names[1:]
    if len(names) > 1:
        raise ValueError(f"extra_keys with more than one salt: {first!r}")
    return (names[0] if names else None), False


def _seq(value: object) -> Sequence[object]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"expected an array, got {value!r}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an int, got {value!r}")
    return value


def _hash(value: object) -> BlockHash:
    """A block hash: bytes as they are, an int as its unsigned 64-bit pattern."""
    if isinstance(value, bytes):
        return value
    number = _int(value)
    if not -(2**63) <= number < 2**64:
        raise ValueError(f"a block hash is 64-bit, got {number}")
    return number % 2**64


def _as_u64(block_hash: BlockHash) -> BlockHash:
    """An int hash as the router compares it (its 64 bits, unsigned); bytes as they are."""
    return block_hash % 2**64 if isinstance(block_hash, int) else block_hash


def _hash_tuple(value: object) -> tuple[BlockHash, ...]:
    return tuple(_hash(v) for v in _seq(value))


def _token(value: object) -> Token:
    if isinstance(value, list | tuple):
        return tuple(_int(v) for v in value)
    return _int(value)


def _optional_str(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a str or None, got {value!r}")
    return value


class EventStreamModel:
    """The page set a router rebuilds from one cache's stream; rejects a broken stream."""

    def __init__(
        self, page_size: int, hashes: HashPolicy = "radixkv", layout: Layout = "sglang"
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if hashes not in ("radixkv", "opaque"):
            raise ValueError(f"hashes must be 'radixkv' or 'opaque', got {hashes!r}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'sglang' or 'vllm', got {layout!r}")
        self.page_size = page_size
        self.hashes = hashes
        self.layout = layout
        self.pages: dict[BlockHash, StoredPage] = {}
        self.records = 0

    # ---- applying records -------------------------------------------------------------

    def apply_batch(self, batch: Sequence[object]) -> None:
        """A wire batch ``[ts, records]`` or ``[ts, records, data_parallel_rank]``."""
        if len(batch) not in (2, 3):
            raise ValueError(f"not a batch: {batch!r}")
        for record in _seq(batch[1]):
            if not isinstance(record, Mapping | list | tuple):
                raise ValueError(f"not a record: {record!r}")
            self.apply_wire(record)

    def apply_wire(self, record: Sequence[object] | Mapping[str, object]) -> None:
        self.apply(parse_record(record, self.layout))

    def apply_all(self, records: Iterable[Record]) -> None:
        for record in records:
            self.apply(record)

    def apply(self, record: Record) -> None:
        self.records += 1
        if isinstance(record, Stored):
            self.stored(record)
        elif isinstance(record, Removed):
            self.removed(record.block_hashes)
        else:
            self.pages.clear()

    def stored(self, record: Stored) -> None:
        """Add the record's pages, checking INV-40 and INV-42 before changing anything."""
        new = self._chain(record)
        for block_hash, page in new:
            self.pages[block_hash] = page

    def removed(self, block_hashes: Sequence[BlockHash]) -> None:
        block_hashes = [_as_u64(h) for h in block_hashes]
        unknown = [h for h in block_hashes if h not in self.pages]
        holds(not unknown, "INV-41", f"removed pages that are not stored: {unknown!r}", "unknown")
        holds(
            len(set(block_hashes)) == len(block_hashes),
            "INV-41",
            f"a page removed twice in one record: {list(block_hashes)}",
            "twice",
        )
        for h in block_hashes:
            del self.pages[h]

    def _chain(self, record: Stored) -> list[tuple[BlockHash, StoredPage]]:
        p, hashes = self.page_size, [_as_u64(h) for h in record.block_hashes]
        holds(
            record.block_size == p, "INV-40", f"block_size {record.block_size} != {p}", "block-size"
        )
        holds(bool(hashes), "INV-40", "a BlockStored with no pages", "empty")
        holds(
            len(record.token_ids) == p * len(hashes),
            "INV-40",
            f"{len(record.token_ids)} tokens for {len(hashes)} pages of {p}",
            "token-count",
        )
        prior, path, namespace = self._parent(record)
        new: list[tuple[BlockHash, StoredPage]] = []
        for i, block_hash in enumerate(hashes):
            page = record.token_ids[i * p : (i + 1) * p]
            path += page
            holds(
                block_hash not in self.pages and all(h != block_hash for h, _ in new),
                "INV-40",
                f"page {block_hash!r} stored again without a removal between",
                "stored-twice",
            )
            if self.hashes == "radixkv":
                prior = hash_token_ids(page, prior)
                holds(
                    block_hash == block_hash_of(prior),
                    "INV-42",
                    f"page {i} hashes to {block_hash!r}, the spec says {block_hash_of(prior)}",
                )
            new.append((block_hash, StoredPage(prior, namespace, path)))
        return new

    def _parent(self, record: Stored) -> tuple[str | None, PagePath, Namespace]:
        """The prior hash and the token path the record's first page continues, and the
        record's namespace."""
        if record.parent_block_hash is None:
            if record.extra_key is None or self.hashes == "opaque":
                return None, (), record.extra_key
            return namespace_seed(record.extra_key), (), record.extra_key
        parent = self.pages.get(_as_u64(record.parent_block_hash))
        holds(
            parent is not None,
            "INV-40",
            f"parent {record.parent_block_hash!r} is not stored",
            "orphan",
        )
        assert parent is not None
        namespace = parent.namespace if record.inherits else record.extra_key
        holds(
            parent.namespace == namespace,
            "INV-40",
            f"namespace {namespace!r} under a page of {parent.namespace!r}",
            "namespace",
        )
        return parent.digest, parent.path, namespace

    # ---- what the router knows ---------------------------------------------------------

    def page_set(self) -> frozenset[BlockHash]:
        return frozenset(self.pages)

    def positions(self) -> set[tuple[Namespace, PagePath]]:
        """Every stored page as (namespace, tokens from the root to its end)."""
        return {(page.namespace, page.path) for page in self.pages.values()}

    def path_counts(self) -> Counter[PagePath]:
        """How many stored pages end each token path (namespaces aside: ``opaque`` hashes)."""
        return Counter(page.path for page in self.pages.values())


ROUTER_TOKEN_LIMIT: Final = 2**32
"""Token ids a router is told lie below this: Dynamo reads a token id as unsigned 32-bit."""


def router_told(ns: Namespace, path: Sequence[Token]) -> bool:
    """Whether a router is told of the page ending ``path`` (its root path) in namespace
    ``ns`` (SPEC.md, "KV events", "What a router is not told").

    Not in the ``""`` namespace: vLLM and Dynamo read an empty salt as none, so its pages
    would land on the ``None`` namespace's. Every token on the path a plain ``int`` id below
    ``2**32``: Dynamo reads ids as u32, vLLM's schema has no bigram (tuple) token, and a
    bool is not an id on the wire. A page is told only with every page above it (its
    chain's hashes start at the root), so the told pages are prefix-closed. (The parameter
    is ``ns``: CrossHair misreads a condition that names a parameter ``namespace``.)

    post: __return__ == (ns != "" and all(type(t) is int and 0 <= t < 2**32 for t in path))
    post: not __return__ or all(router_told(ns, path[:n]) for n in range(len(path)))
    """
    # type(...) is int: a bool is an int to Python but not a token id a router reads
    return ns != "" and all(
        type(token) is int and 0 <= token < ROUTER_TOKEN_LIMIT for token in path
    )


def told_positions(
    positions: Iterable[tuple[Namespace, Sequence[Token]]],
) -> set[tuple[Namespace, PagePath]]:
    """The pages a router's view of a worker must equal: the worker's cached ``positions``
    less those it is not told (``router_told``), which the engine's filter keeps out."""
    return {(ns, tuple(path)) for ns, path in positions if router_told(ns, path)}


def expected_page_set(
    positions: Iterable[tuple[Namespace, Sequence[Token]]], page_size: int
) -> frozenset[int]:
    """The block hashes (``block_hash_of``) of the pages ending at ``positions`` (namespace,
    aligned prefix).

    Each page is hashed once, after the page before it (shorter positions first).
    """
    digests: dict[tuple[Namespace, PagePath], str] = {}
    for ns, path in sorted(((ns, tuple(path)) for ns, path in positions), key=_length):
        digests[ns, path] = hash_token_ids(path[-page_size:], _prior(digests, ns, path, page_size))
    return frozenset(block_hash_of(d) for d in digests.values())


def block_hash_of(page_hash: str) -> int:
    """A page's block hash as a router compares it: ``hash_to_int64`` of its §9 hash, read as
    unsigned 64-bit (what radixkv publishes)."""
    return hash_to_int64(page_hash) % 2**64


def _length(position: tuple[Namespace, PagePath]) -> int:
    return len(position[1])


def _prior(
    digests: dict[tuple[Namespace, PagePath], str],
    ns: Namespace,
    path: PagePath,
    page_size: int,
) -> str | None:
    parent = path[:-page_size]
    if not parent:
        return None if ns is None else namespace_seed(ns)
    if (ns, parent) in digests:
        return digests[ns, parent]
    return page_hashes(ns, parent, page_size)[-1]  # not prefix-closed: hash the chain


__all__ = [
    "CLEARED",
    "REMOVED",
    "ROUTER_TOKEN_LIMIT",
    "STORED",
    "TAG",
    "BlockHash",
    "Cleared",
    "EventStreamModel",
    "Layout",
    "Record",
    "Removed",
    "Stored",
    "StoredPage",
    "block_hash_of",
    "expected_page_set",
    "parse_record",
    "router_told",
    "told_positions",
]
