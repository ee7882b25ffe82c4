"""Keys: how a caller's key becomes what a tree compares and stores (the front door).

Every name of the key code is importable from here, as it was when this was one module;
each concept lives in a module of its own, named for it:

- radix_key.py: the caller's ``RadixKey`` (token ids, namespace tag, limit) and
  ``limit_of``, how a reader applies the limit;
- key_data.py: the forms of key data (int64 ``bytes``, int32 ``Ids32``, token tuples, a
  list read in place as a ``ListKey``) and the functions that slice, count and decode them;
- key_encoding.py: a caller's token ids (list, tuple, array, memoryview, tensor) turned into
  key data: ``key_data_of``, ``encode``;
- key_validation.py: the exact checks, which name the first bad token id;
- key_helpers.py: the per-token loops in pure Python (pack, sign test, common prefix): the
  reference of the compiled helpers (native.py, _keys.c);
- key_reading.py: ``read_key`` and ``KeyRead``, the one place a cache reads a key.

A cache reads a key once, at the top of ``match_prefix`` or ``insert``::

    with read_key(key, page_size, tree.packed) as read:  # checks the key, packs, drops the tail
        walk = tree.descend(read)                        # compares with ``read.shared``
        read.require_valid_from(walk.end)  # the part the tree does not hold must be valid

**Key data.** A tree node holds its tokens as ``KeyData``: a ``bytes`` object of
native-endian int64 ids (``PACKED`` bytes a token; int32 ``Ids32``, ``COMPACT`` bytes a
token, on the compiled path when they fit), or, once a bigram (tuple) token reached the
tree, a tuple of tokens. A tree uses one form for all its nodes: the first bigram key
converts it, and it never converts back. A key held as an ``array('q')`` (or an int64
memoryview) is not even copied: the tree compares against a view of the caller's buffer and
copies only the part it stores.

**Validation, once.** Packing with ``struct`` rejects anything that is not an int (or has
``__index__``) in the int64 range, in C. The sign bit of every packed id catches negative
ones; that test is left for the part of the key the tree does not hold already
(``require_valid_from``, or ``new_part`` on the copy an insert stores): a part equal to
stored tokens is valid. When the fast path refuses a key, the exact checks
(``validate_tokens``) name the first bad token.

**The compiled-helper boundary.** native.py declares the compiled helpers: eight
functions with plain, typed arguments (``KeyHelpers``; types in _keys.pyi, code in
_keys.c). The pure Python is their reference: where a helper answers, it answers as the
reference does, byte for byte; what it cannot decide (an item that is not a plain id: an
exact int or bool in [0, 2**63)) it reports (``None``, ``False``), and the reference path
decides:

- ``plain_ids(seq, end, start)`` and ``pack(seq, start, end)``: a list's ids checked, or
  packed, in place; the reference is ``pack_ids`` then ``signs_clear`` (key_helpers.py);
- ``pack32(seq, start, end)`` and ``narrow(packed)``: the int32 copy of the part an insert
  stores, from a list or from int64 bytes; compiled path only (the pure path stores the same
  ids as int64 bytes, and ``decode`` reads both alike);
- ``shared(stored, seq, start, end)`` and ``shared32(stored, probe, start, end)``: how
  many stored int64 (int32) ids a key repeats; the reference is ``common_prefix_bytes``
  (on int32 ids widened first);
- ``widen(compact)``: int32 ids as int64 ones; the reference is ``widen``'s ``struct`` path
  (key_data.py);
- ``signs_clear(buffer, start)``: no id of a buffer is negative; the reference is
  ``signs_clear``, through ``no_negative_ids`` for a view.

Token tuples never reach the helpers: ``common_prefix_len`` compares them on both builds.

**The compiled path** (``radixkv._keys``, built by ``pip install .`` when a compiler is
there; off under ``RADIXKV_PURE=1``). A ``list`` or tuple is not packed at all: it is read
in place (``ListKey``), each id once per call. The walk compares its ids in C with the
stored ones (an id that is not an exact int or bool in [0, 2**63) equals none), one C pass
checks the ids after the part the tree holds (``KeyRead.settle``), and only the parts the
tree stores (straight to int32 ids when they fit) or a dict key needs are packed. The sign
test runs in C on any buffer (``no_negative_ids``: a view of the caller's array is not
copied). A list the check refuses (an odd id, a bad one, a bigram) is read again by the
reference path, which decides and raises, and walked again; the helpers never raise a
usage error themselves, so both paths behave the same, errors included
(tests/keys/test_native_keys.py compares them).

**A limited key** (``RadixKey(token_ids, limit=n)``) is ``token_ids[:n]`` on every path,
read without a copy of the caller's sequence: a list or tuple stays in place (``ListKey``
of ``n`` tokens, whose ids the helpers check only up to ``n``), an array or memoryview is a
shorter view, a tensor a shorter view before its one copy, and the pure path packs only the
first ``n`` ids. Ids after the limit are never read, so a bad one there is no error
(tests/keys/test_key_limit.py compares every call with the one on the sliced key).
"""

from __future__ import annotations

# Each ``_name as _name`` keeps a private name of the one-module days importable from here.
from radixkv.errors import TokenTypeError, UsageError
from radixkv.key_data import _PACKERS as _PACKERS
from radixkv.key_data import (
    COMPACT,
    PACKED,
    Ids32,
    KeyData,
    KeyView,
    ListKey,
    Token,
    Tokens,
    decode,
    int64_packer,
    page_at,
    span,
    token_count,
    widen,
    width,
)
from radixkv.key_encoding import _pack as _pack
from radixkv.key_encoding import _tensor_bytes as _tensor_bytes
from radixkv.key_encoding import encode, key_data_of
from radixkv.key_helpers import _CHUNK as _CHUNK
from radixkv.key_helpers import (
    SIGN_BYTE,
    common_prefix_bytes,
    common_prefix_len,
    no_negative_ids,
    pack_ids,
    signs_clear,
)
from radixkv.key_helpers import _views_signs_clear as _views_signs_clear
from radixkv.key_reading import KeyRead, read_key
from radixkv.key_reading import _read_in_place as _read_in_place
from radixkv.key_validation import MAX_TOKEN_ID, key_ids, not_a_sequence, validate_tokens
from radixkv.key_validation import _as_int as _as_int
from radixkv.key_validation import _check_range as _check_range
from radixkv.key_validation import _plain_ids as _plain_ids
from radixkv.key_validation import _validate_token as _validate_token
from radixkv.radix_key import REPR_IDS, RadixKey, extra_key_error, key_limit, limit_of
from radixkv.radix_key import _first_ids as _first_ids

# The one-module names of two helpers that other modules call now (so public there).
_int64_packer = int64_packer
_key_data = key_data_of

__all__ = [
    "COMPACT",
    "MAX_TOKEN_ID",
    "PACKED",
    "REPR_IDS",
    "SIGN_BYTE",
    "Ids32",
    "KeyData",
    "KeyRead",
    "KeyView",
    "ListKey",
    "RadixKey",
    "Token",
    "TokenTypeError",
    "Tokens",
    "UsageError",
    "common_prefix_bytes",
    "common_prefix_len",
    "decode",
    "encode",
    "extra_key_error",
    "int64_packer",
    "key_data_of",
    "key_ids",
    "key_limit",
    "limit_of",
    "no_negative_ids",
    "not_a_sequence",
    "pack_ids",
    "page_at",
    "read_key",
    "signs_clear",
    "span",
    "token_count",
    "validate_tokens",
    "widen",
    "width",
]
