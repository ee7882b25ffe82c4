"""Page hashes: the documented byte format, checked against hashlib/struct computed here."""

from __future__ import annotations

import hashlib
import struct

import pytest

from radixkv import UsageError, hash_bytes, hash_to_int64, hash_token_ids, namespace_seed
from radixkv.keys import Token


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def small(*ids: int) -> bytes:
    """A page whose ids are all below 2**32: 4-byte little-endian unsigned per id."""
    return struct.pack(f"<{len(ids)}I", *ids)


def large(*ids: int) -> bytes:
    """A page holding an id >= 2**32: the 0xff tag, then 8-byte little-endian per id."""
    return b"\xff" + struct.pack(f"<{len(ids)}Q", *ids)


# ---- hash_token_ids: independent recomputation ---------------------------------------------


@pytest.mark.parametrize(
    "page",
    [[], [0], [1, 2, 3], [2**32 - 1], [7] * 16, list(range(100, 164))],
)
def test_small_ids_are_4_byte_little_endian(page: list[int]) -> None:
    assert hash_token_ids(page) == sha(small(*page))


def test_tuple_tokens_hash_element_wise() -> None:
    assert hash_token_ids([(1, 2), (3, 4)]) == sha(small(1, 2, 3, 4))
    assert hash_token_ids([5, (6, 7)]) == sha(small(5, 6, 7))


def test_prior_hash_raw_bytes_come_first() -> None:
    prior = sha(b"anything")
    assert hash_token_ids([4, 5], prior) == sha(bytes.fromhex(prior) + small(4, 5))
    assert hash_token_ids([4, 5], prior) != hash_token_ids([4, 5])


def test_empty_prior_is_no_prior() -> None:
    assert hash_token_ids([4, 5], "") == hash_token_ids([4, 5]) == sha(small(4, 5))
    assert hash_token_ids([4, 5], None) == sha(small(4, 5))


@pytest.mark.parametrize(
    "page",
    [[2**32], [1, 2**32], [2**63 - 1, 0, 5], [2**40, 2**32 - 1]],
)
def test_a_page_with_a_large_id_is_tagged_and_8_byte_encoded(page: list[int]) -> None:
    assert hash_token_ids(page) == sha(large(*page))
    assert hash_token_ids(page) != sha(small(*[i % 2**32 for i in page]))


def test_a_large_id_inside_a_tuple_switches_the_whole_page() -> None:
    assert hash_token_ids([1, (2, 2**32)]) == sha(large(1, 2, 2**32))


def test_large_form_chains_after_a_prior() -> None:
    prior = hash_token_ids([1])
    assert hash_token_ids([2**33], prior) == sha(bytes.fromhex(prior) + large(2**33))


def test_the_tag_keeps_the_8_byte_form_apart_from_the_4_byte_form() -> None:
    # Untagged, [2**32] as one 8-byte word would be the same bytes as [0, 1] in 4-byte words.
    assert struct.pack("<Q", 2**32) == small(0, 1)
    assert hash_token_ids([2**32]) != hash_token_ids([0, 1])
    assert hash_token_ids([0, 1]) == sha(small(0, 1))


def test_bigram_and_flat_pages_collide_as_documented() -> None:
    """The pymllm-compatible encoding has no tuple tag: [(1, 2)] and [1, 2] hash alike."""
    assert hash_token_ids([(1, 2)]) == hash_token_ids([1, 2])


@pytest.mark.parametrize("page", [[-1], [1, -5], [(1, -1)], [2**63]])
def test_out_of_range_ids_are_a_value_error(page: list[Token]) -> None:
    with pytest.raises(ValueError):
        hash_token_ids(page)
    with pytest.raises(UsageError):
        hash_token_ids(page)


@pytest.mark.parametrize("page", [[1.0], ["a"], [(1, "b")]])
def test_non_int_ids_are_a_type_error(page: list[object]) -> None:
    with pytest.raises(TypeError):
        hash_token_ids(page)  # type: ignore[arg-type]


def test_a_bool_id_is_the_int_it_equals() -> None:
    assert hash_token_ids([True, False, 7]) == hash_token_ids([1, 0, 7])


# ---- hard-coded vectors (a change of encoding breaks these) -------------------------------


def test_hard_coded_vectors() -> None:
    assert hash_token_ids([]) == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    first = hash_token_ids([1, 2, 3])
    assert first == "4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d"
    assert hash_token_ids([4, 5, 6], first) == (
        "b33a1d453499d2f2cc40ae1c3579a476f2576432f8dcb7d4c235aa946a68d4bf"
    )
    assert hash_token_ids([(1, 2), (3, 4)]) == (
        "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"
    )
    assert hash_token_ids([1, 2**32]) == (
        "66af2f218931e670270f1b4ea79f49befb670188f60c94856ed7a1743298f181"
    )


def test_hard_coded_namespace_seeds() -> None:
    assert namespace_seed("a") == (
        "ee3b9fd5fb7b2cf2faae80646ae0e74f046a7f072113f6b22403146c8032f403"
    )
    assert namespace_seed("") == (
        "d0703b55c54a6ccbe0e97683a7e7daf2889330f9a1bff613df789f0ab3ae5585"
    )


def test_hard_coded_hash_bytes() -> None:
    assert hash_bytes(b"hello") == 3238736544897475342


# ---- namespace_seed -------------------------------------------------------------------------


@pytest.mark.parametrize("extra_key", ["", "a", "lora:7", "ünï"])
def test_namespace_seed_is_the_tagged_utf8_digest(extra_key: str) -> None:
    expected = sha(b"radixkv:namespace:" + extra_key.encode("utf-8"))
    assert namespace_seed(extra_key) == expected


def test_none_namespace_has_no_seed() -> None:
    assert namespace_seed(None) is None


def test_empty_namespace_seed_is_not_empty() -> None:
    seed = namespace_seed("")
    assert seed
    assert hash_token_ids([1], seed) != hash_token_ids([1], namespace_seed(None))


# ---- hash_to_int64 and hash_bytes -----------------------------------------------------------


def signed64(hex_str: str) -> int:
    return int(struct.unpack(">q", bytes.fromhex(hex_str[:16]))[0])


@pytest.mark.parametrize(
    ("hex_str", "expected"),
    [
        ("0" * 64, 0),
        ("0000000000000001" + "f" * 48, 1),
        ("7fffffffffffffff" + "0" * 48, 2**63 - 1),
        ("8000000000000000" + "0" * 48, -(2**63)),
        ("ffffffffffffffff" + "0" * 48, -1),
    ],
)
def test_hash_to_int64_edges(hex_str: str, expected: int) -> None:
    assert hash_to_int64(hex_str) == expected


@pytest.mark.parametrize("data", [b"", b"x", b"token page", bytes(range(256))])
def test_hash_to_int64_is_the_signed_first_16_hex_digits(data: bytes) -> None:
    digest = sha(data)
    assert hash_to_int64(digest) == signed64(digest)


@pytest.mark.parametrize("data", [b"", b"x", b"mm-embedding", bytes(range(256))])
def test_hash_bytes_is_the_big_endian_unsigned_first_8_bytes(data: bytes) -> None:
    expected = int(struct.unpack(">Q", hashlib.sha256(data).digest()[:8])[0])
    assert hash_bytes(data) == expected
    assert 0 <= hash_bytes(data) < 2**64


def test_hash_bytes_agrees_with_hash_to_int64_modulo_2_64() -> None:
    for data in (b"a", b"b", b"c", b"dd"):
        assert hash_bytes(data) == hash_to_int64(sha(data)) % 2**64
