"""Replayable traces: the steps of a failing run as language-neutral JSON (FORMAT.md).

``trace_document`` turns the steps a machine logged into a document; ``write`` and
``load`` keep it on disk. Replaying one is ``radixkv_conformance.replay``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from radixkv_conformance.findings import invariant_id

Step = dict[str, Any]
"""One step of a run as a trace records it (FORMAT.md): its id, op, arguments, expect."""

FORMAT = "radixkv-trace/2"
"""The format written. Version 2 names the profile ``profile``; version 1 called it
``semantics``, and its traces are still read (``upgraded``)."""
READ = ("radixkv-trace/1", FORMAT)


def encode(value: Any) -> Any:
    """A plain value as JSON: tuples and bytes are tagged (``$tuple``, ``$bytes``)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return bytes.fromhex(value["$bytes"])
        if set(value) == {"$tuple"}:
            return tuple(decode(v) for v in value["$tuple"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def trace_document(
    run: dict[str, Any],
    steps: list[dict[str, Any]],
    known: Iterable[str],
    check: str,
    message: str,
    finding: str,
    came_past: Iterable[tuple[int, str]] = (),
) -> dict[str, Any]:
    """The steps of a run so far, as a trace document (see FORMAT.md). ``run`` holds the
    header fields: implementation, semantics (the profile), mode, page_size and, for an
    SWA run, sliding_window; ``came_past`` the (step id, finding id) of each acknowledged
    finding the run went on past."""
    document: dict[str, Any] = {"format": FORMAT, **run}
    document["failure"] = {
        "check": check,
        "invariant": invariant_id(message),
        "finding": finding,
        "message": message,
        "step": steps[-1]["id"] if steps else None,
    }
    if known:  # the run went on past these: its replay must too
        document["known"] = sorted(known)
    past = [{"step": step, "finding": fid} for step, fid in came_past]
    if past:
        document["came_past"] = past
    document["steps"] = [encode(step) for step in steps]
    return document


def dumps(document: dict[str, Any]) -> str:
    """The document as JSON: the header indented, one step per line."""
    header = {k: v for k, v in document.items() if k != "steps"}
    head = json.dumps(header, indent=1)[:-2]
    steps = ",\n  ".join(json.dumps(step) for step in document["steps"])
    return f'{head},\n "steps": [\n  {steps}\n ]\n}}\n'


def write(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(document))


def load(path: Path | str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(Path(path).read_text())
    if document.get("format") not in READ:
        raise ValueError(f"{path}: not a radixkv trace (format {' or '.join(READ)})")
    return upgraded(document)


def upgraded(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` in the format written now: a version 1 trace's ``semantics`` is its
    ``profile`` (the same document when it is one already)."""
    if document.get("format") == FORMAT or "semantics" not in document:
        return document
    header = {k: v for k, v in document.items() if k not in ("format", "semantics")}
    return {"format": FORMAT, "profile": document["semantics"], **header}


def file_label(label: str) -> str:
    """``label`` (a cache's) as part of a trace file's name: lower case, every character
    but a letter or digit a dash. Not ``findings.slug``, which makes ids and folds a run of
    such characters into one dash: file names written so far keep theirs
    (``RadixCache (SWA)`` is ``radixcache--swa``)."""
    return "".join(ch if ch.isalnum() else "-" for ch in label.lower()).strip("-")
