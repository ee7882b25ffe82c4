"""Every Python example of the library's documentation runs as printed: the plain cache (the
README's "A minute with the library"), the sliding window on ``HybridKVAllocator`` and Mamba
on ``MambaStatePool`` (docs/library.md, the site's tour). The examples assert what they
show, so a cache or a pool that changed behaviour fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOUR = ROOT / "docs" / "library.md"


def section_examples(path: Path, heading: str) -> list[str]:
    """The ```python blocks from ``heading`` to the next heading of its level or above."""
    text = path.read_text()
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [text.find(f"\n{'#' * n} ", start) for n in range(1, len(level) + 1)]
    end = min((e for e in ends if e != -1), default=len(text))
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


EXAMPLES = {
    "plain": section_examples(README, "## A minute with the library"),
    "sliding-window": section_examples(TOUR, "## With a sliding window"),
    "mamba": section_examples(TOUR, "## Mamba and other state-space hybrids"),
}


def test_each_section_holds_its_example() -> None:
    assert {name: len(codes) for name, codes in EXAMPLES.items()} == dict.fromkeys(EXAMPLES, 1)
    assert "RadixCache(page_size=1" in EXAMPLES["plain"][0]
    assert "HybridKVAllocator" in EXAMPLES["sliding-window"][0]
    assert "MambaRadixCache" in EXAMPLES["mamba"][0]


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_runs(name: str) -> None:
    (code,) = EXAMPLES[name]
    exec(compile(code, f"{name} example", "exec"), {"__name__": "readme_example"})


def test_the_readme_example_prints_no_warning() -> None:
    """The README's first snippet starts with ``import torch``, which warns "Failed to
    initialize NumPy" where numpy is absent: radixkv's install brings numpy (pyproject.toml)
    so that a fresh environment runs the snippet quietly (issue 38, item 4)."""
    (code,) = EXAMPLES["plain"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert (done.returncode, done.stderr) == (0, "")
