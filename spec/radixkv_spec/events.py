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
  positions equal the cache's.

Records come in their wire form (what a msgpack decoder gives for vLLM's tagged,
array-like records): a sequence whose first item is the tag ``"BlockStored"``,
``"BlockRemoved"`` or ``"AllBlocksCleared"`` followed by the fields in order; a batch is
``(ts, records)``. Standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from radixkv_spec.hashing import hash_to_int64, hash_token_ids, namespace_seed, page_hashes
from radixkv_spec.invariants import holds
from radixkv_spec.tokens import Namespace, Token

STORED, REMOVED, CLEARED = "BlockStored", "BlockRemoved", "AllBlocksCleared"
PagePath = tuple[Token, ...]
HashPolicy = Literal["radixkv", "opaque"]
"""``radixkv``: hashes are SPEC.md §9's (INV-42 checked; namespaces come from the records).
``opaque``: another engine's own hashes, checked only as names (INV-40, 41, 43); the stream
then knows each page's token path through the parent links but not its namespace."""


@dataclass(frozen=True)
class StoredPage:
    """What the router knows about one stored page: its hash chain and where it ends."""

    digest: str | None  # the full SHA-256 hex (the next page's prior); None: opaque hashes
    namespace: Namespace
    path: PagePath  # every token from the namespace's root to the page's end


@dataclass(frozen=True)
class Stored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[Token, ...]
    block_size: int
    extra_key: Namespace = None


@dataclass(frozen=True)
class Removed:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True)
class Cleared:
    pass


Record = Stored | Removed | Cleared


def parse_record(record: Sequence[object]) -> Record:
    """A record's wire form (tag, then fields in order; trailing defaults may be left out).

    ``BlockStored``: block_hashes, parent_block_hash, token_ids, block_size, lora_id,
    medium, extra_key. ``BlockRemoved``: block_hashes, medium. ``AllBlocksCleared``: none.
    Raises ``ValueError`` for a record that is not one of them.
    """
    if not record or not isinstance(record[0], str):
        raise ValueError(f"not a tagged record: {record!r}")
    tag, fields = record[0], list(record[1:])
    if tag == STORED and 4 <= len(fields) <= 7:
        hashes, parent, tokens, block_size = fields[:4]
        extra_key = fields[6] if len(fields) == 7 else None
        return Stored(
            _int_tuple(hashes),
            None if parent is None else _int(parent),
            tuple(_token(t) for t in _seq(tokens)),
            _int(block_size),
            _namespace(extra_key),
        )
    if tag == REMOVED and 1 <= len(fields) <= 2:
        return Removed(_int_tuple(fields[0]))
    if tag == CLEARED and not fields:
        return Cleared()
    raise ValueError(f"unknown record {tag!r} with {len(fields)} fields")


def _seq(value: object) -> Sequence[object]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"expected an array, got {value!r}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an int, got {value!r}")
    return value


def _int_tuple(value: object) -> tuple[int, ...]:
    return tuple(_int(v) for v in _seq(value))


def _token(value: object) -> Token:
    if isinstance(value, list | tuple):
        return tuple(_int(v) for v in value)
    return _int(value)


def _namespace(value: object) -> Namespace:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"extra_key must be a str or None, got {value!r}")
    return value


class EventStreamModel:
    """The page set a router rebuilds from one cache's stream; rejects a broken stream."""

    def __init__(self, page_size: int, hashes: HashPolicy = "radixkv") -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if hashes not in ("radixkv", "opaque"):
            raise ValueError(f"hashes must be 'radixkv' or 'opaque', got {hashes!r}")
        self.page_size = page_size
        self.hashes = hashes
        self.pages: dict[int, StoredPage] = {}
        self.records = 0

    # ---- applying records -------------------------------------------------------------

    def apply_batch(self, batch: Sequence[object]) -> None:
        """A wire batch ``(ts, records)``; trailing batch fields (a rank) are ignored."""
        if len(batch) < 2:
            raise ValueError(f"not a batch: {batch!r}")
        for record in _seq(batch[1]):
            self.apply_wire(_seq(record))

    def apply_wire(self, record: Sequence[object]) -> None:
        self.apply(parse_record(record))

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

    def removed(self, block_hashes: Sequence[int]) -> None:
        unknown = [h for h in block_hashes if h not in self.pages]
        holds(not unknown, "INV-41", f"removed pages that are not stored: {unknown}", "unknown")
        holds(
            len(set(block_hashes)) == len(block_hashes),
            "INV-41",
            f"a page removed twice in one record: {list(block_hashes)}",
            "twice",
        )
        for h in block_hashes:
            del self.pages[h]

    def _chain(self, record: Stored) -> list[tuple[int, StoredPage]]:
        p, hashes = self.page_size, record.block_hashes
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
        prior, path = self._parent(record)
        new: list[tuple[int, StoredPage]] = []
        for i, block_hash in enumerate(hashes):
            page = record.token_ids[i * p : (i + 1) * p]
            path += page
            holds(
                block_hash not in self.pages and all(h != block_hash for h, _ in new),
                "INV-40",
                f"page {block_hash} stored again without a removal between",
                "stored-twice",
            )
            if self.hashes == "radixkv":
                prior = hash_token_ids(page, prior)
                holds(
                    block_hash == hash_to_int64(prior),
                    "INV-42",
                    f"page {i} hashes to {block_hash}, the spec says {hash_to_int64(prior)}",
                )
            new.append((block_hash, StoredPage(prior, record.extra_key, path)))
        return new

    def _parent(self, record: Stored) -> tuple[str | None, PagePath]:
        """The prior hash and the token path the record's first page continues."""
        if record.parent_block_hash is None:
            if record.extra_key is None or self.hashes == "opaque":
                return None, ()
            return namespace_seed(record.extra_key), ()
        parent = self.pages.get(record.parent_block_hash)
        holds(
            parent is not None,
            "INV-40",
            f"parent {record.parent_block_hash} is not stored",
            "orphan",
        )
        assert parent is not None
        holds(
            parent.namespace == record.extra_key,
            "INV-40",
            f"namespace {record.extra_key!r} under a page of {parent.namespace!r}",
            "namespace",
        )
        return parent.digest, parent.path

    # ---- what the router knows ---------------------------------------------------------

    def page_set(self) -> frozenset[int]:
        return frozenset(self.pages)

    def positions(self) -> set[tuple[Namespace, PagePath]]:
        """Every stored page as (namespace, tokens from the root to its end)."""
        return {(page.namespace, page.path) for page in self.pages.values()}

    def path_counts(self) -> Counter[PagePath]:
        """How many stored pages end each token path (namespaces aside: ``opaque`` hashes)."""
        return Counter(page.path for page in self.pages.values())


def expected_page_set(
    positions: Iterable[tuple[Namespace, Sequence[Token]]], page_size: int
) -> frozenset[int]:
    """The int64 hashes of the pages ending at ``positions`` (namespace, aligned prefix).

    Each page is hashed once, after the page before it (shorter positions first).
    """
    digests: dict[tuple[Namespace, PagePath], str] = {}
    for ns, path in sorted(((ns, tuple(path)) for ns, path in positions), key=_length):
        digests[ns, path] = hash_token_ids(path[-page_size:], _prior(digests, ns, path, page_size))
    return frozenset(hash_to_int64(d) for d in digests.values())


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
    "STORED",
    "Cleared",
    "EventStreamModel",
    "Record",
    "Removed",
    "Stored",
    "StoredPage",
    "expected_page_set",
    "parse_record",
]
