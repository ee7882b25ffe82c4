"""The page-hash encoding, checked against plain hashlib and against SPEC.md's vectors."""

import hashlib
import struct
from pathlib import Path

import pytest
from radixkv_spec.hashing import (
    encode_page,
    hash_bytes,
    hash_to_int64,
    hash_token_ids,
    namespace_seed,
    page_hashes,
)

SPEC_MD = Path(__file__).resolve().parents[2] / "SPEC.md"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plain(*ids: int) -> bytes:
    """The 4-byte little-endian form, written out independently of spec.hashing."""
    return struct.pack(f"<{len(ids)}I", *ids)


def tagged(*ids: int) -> bytes:
    """The tagged 8-byte little-endian form, written out independently of spec.hashing."""
    return b"\xff" + struct.pack(f"<{len(ids)}Q", *ids)


# (name, computed by the spec, computed by hand with hashlib, published digest)
VECTORS: list[tuple[str, str, str, str]] = [
    (
        "empty page, no prior",
        hash_token_ids([]),
        sha(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ),
    (
        "[1, 2, 3]",
        hash_token_ids([1, 2, 3]),
        sha(plain(1, 2, 3)),
        "4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d",
    ),
    (
        "[0]",
        hash_token_ids([0]),
        sha(plain(0)),
        "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119",
    ),
    (
        "[(1, 2)]",
        hash_token_ids([(1, 2)]),
        sha(plain(1, 2)),
        "34fb5c825de7ca4aea6e712f19d439c1da0c92c37b423936c5f618545ca4fa1f",
    ),
    (
        "[2**32]",
        hash_token_ids([2**32]),
        sha(tagged(2**32)),
        "51e2a39324194d5161469fa264a9384235bfab266722e69a80a15cd932185a33",
    ),
    (
        "[1, 2**32]",
        hash_token_ids([1, 2**32]),
        sha(tagged(1, 2**32)),
        "66af2f218931e670270f1b4ea79f49befb670188f60c94856ed7a1743298f181",
    ),
    (
        "[3, 4] after [1, 2]",
        hash_token_ids([3, 4], hash_token_ids([1, 2])),
        sha(bytes.fromhex(sha(plain(1, 2))) + plain(3, 4)),
        "c57b445f90651b9a650e516ab2238c965b21af35608a31c303e6d9e407f2915c",
    ),
    (
        'namespace_seed("")',
        namespace_seed(""),
        sha(b"radixkv:namespace:"),
        "d0703b55c54a6ccbe0e97683a7e7daf2889330f9a1bff613df789f0ab3ae5585",
    ),
    (
        'namespace_seed("a")',
        namespace_seed("a"),
        sha(b"radixkv:namespace:a"),
        "ee3b9fd5fb7b2cf2faae80646ae0e74f046a7f072113f6b22403146c8032f403",
    ),
    (
        'page 0 of [1, 2, 3, 4] in "a"',
        page_hashes("a", [1, 2, 3, 4], 2)[0],
        sha(bytes.fromhex(sha(b"radixkv:namespace:a")) + plain(1, 2)),
        "df8f3e6c8770acb4387aa361684e22f7468f29de94ee2229a61d36db0f0b4df7",
    ),
    (
        'page 1 of [1, 2, 3, 4] in "a"',
        page_hashes("a", [1, 2, 3, 4], 2)[1],
        sha(
            bytes.fromhex(sha(bytes.fromhex(sha(b"radixkv:namespace:a")) + plain(1, 2)))
            + plain(3, 4)
        ),
        "bc22570ac604859a5b0d4f7ab841343f3a0d35f78d89867b653e8ad1925e0e87",
    ),
]


@pytest.mark.parametrize(
    ("name", "spec", "by_hand", "published"), VECTORS, ids=[v[0] for v in VECTORS]
)
def test_vector_matches_hashlib_and_spec_md(
    name: str, spec: str, by_hand: str, published: str
) -> None:
    assert spec == by_hand == published, name
    assert published in SPEC_MD.read_text(encoding="utf-8"), f"SPEC.md lacks {name}"


def test_page_hashes_chain_pages_from_no_prior_in_the_none_namespace() -> None:
    first = sha(plain(1, 2))
    assert page_hashes(None, [1, 2, 3, 4], 2) == [first, sha(bytes.fromhex(first) + plain(3, 4))]


def test_page_hash_depends_on_the_whole_path_and_on_the_namespace() -> None:
    none, empty, a = (page_hashes(ns, [1, 2, 3, 4], 2) for ns in (None, "", "a"))
    assert len({none[1], empty[1], a[1]}) == 3
    assert page_hashes(None, [9, 9, 3, 4], 2)[1] != none[1]


def test_page_hashes_of_a_prefix_are_a_prefix_of_page_hashes() -> None:
    key = [5, 6, 7, 8, 9, 10]
    assert page_hashes("x", key[:4], 2) == page_hashes("x", key, 2)[:2]


def test_page_hashes_reject_a_partial_page() -> None:
    with pytest.raises(ValueError, match="whole pages"):
        page_hashes(None, [1, 2, 3], 2)


def test_empty_prior_acts_like_none() -> None:
    assert hash_token_ids([7], "") == hash_token_ids([7], None) == sha(plain(7))


def test_plain_and_tagged_forms_have_distinct_lengths() -> None:
    assert encode_page([1, (2, 3)]) == plain(1, 2, 3)
    assert encode_page([2**32 - 1]) == plain(2**32 - 1)
    assert encode_page([(1, 2**32)]) == tagged(1, 2**32)
    assert len(encode_page([2**63 - 1])) == 9


@pytest.mark.parametrize("bad", [[-1], [2**63], [(1, -2)]])
def test_out_of_range_token_is_a_value_error(bad: list[object]) -> None:
    with pytest.raises(ValueError, match="outside"):
        hash_token_ids(bad)


@pytest.mark.parametrize("bad", [["1"], [1.0], [(1, "2")], [[1, 2]]])
def test_non_int_token_is_a_type_error(bad: list[object]) -> None:
    with pytest.raises(TypeError):
        hash_token_ids(bad)


@pytest.mark.parametrize(
    ("hex_str", "expected"),
    [
        ("ffffffffffffffff" + "00" * 24, -1),
        ("8000000000000000", -(2**63)),
        ("7fffffffffffffff", 2**63 - 1),
        ("ff", 255),
        ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", -2039914840885289964),
    ],
)
def test_hash_to_int64_is_signed_twos_complement(hex_str: str, expected: int) -> None:
    assert hash_to_int64(hex_str) == expected


def test_hash_bytes_is_the_big_endian_head_of_sha256() -> None:
    head = hashlib.sha256(b"abc").digest()[:8]
    assert hash_bytes(b"abc") == int.from_bytes(head, "big") == 13436514500253700074
    assert hash_bytes(b"abc") % 2**64 == hash_to_int64(sha(b"abc")) % 2**64
