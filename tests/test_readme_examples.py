"""Every Python example of the README's "Using the cache" section runs as printed: the
plain cache, the sliding window on ``HybridKVAllocator``, Mamba on ``MambaStatePool``. The
examples assert what they show, so a cache or a pool that changed behaviour fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Using the cache"


def section_examples() -> list[str]:
    """The ```python blocks from the section's heading to the next level-2 heading."""
    text = README.read_text()
    start = text.index(SECTION) + len(SECTION)
    end = text.index("\n## ", start)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


EXAMPLES = section_examples()


def test_the_section_holds_the_three_examples() -> None:
    heads = [next(line for line in code.splitlines() if "radixkv" in line) for code in EXAMPLES]
    assert len(EXAMPLES) == 3, heads
    assert "HybridKVAllocator" in EXAMPLES[1] and "MambaRadixCache" in EXAMPLES[2]


@pytest.mark.parametrize("code", EXAMPLES, ids=["plain", "sliding-window", "mamba"])
def test_the_example_runs(code: str) -> None:
    exec(compile(code, f"{README.name} example", "exec"), {"__name__": "readme_example"})
