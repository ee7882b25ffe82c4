"""How a cache of the kit's own, written with bugs to plant, is told which to plant."""

from __future__ import annotations

from collections.abc import Mapping


def planted_bugs(bugs: str, known: Mapping[str, str]) -> frozenset[str]:
    """The bugs named in ``bugs`` (comma-separated names of ``known``); ``ValueError``
    naming the known ones for a name that is not."""
    planted = frozenset(b for b in bugs.split(",") if b)
    unknown = planted - set(known)
    if unknown:
        raise ValueError(f"unknown bugs {sorted(unknown)}; known: {sorted(known)}")
    return planted
