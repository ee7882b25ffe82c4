"""examples/dict_cache.py, the adapter a user copies (README, docs/adapters.md), runs as its
docstring says: ``radixkv check examples.dict_cache:factory`` from the repository's root
holds without torch, and its planted bug (``--option bug=1``) is reported as a finding."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.search  # kit searches: run once, not again on the pure key path

ROOT = Path(__file__).resolve().parents[2]
CHECK = """
import sys
sys.modules["torch"] = None  # the example needs the kit alone: importing torch fails here
from radixkv_conformance.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def radixkv_check(traces: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``radixkv check examples.dict_cache:factory --budget 1 ARGS`` run from the root."""
    command = ["check", "examples.dict_cache:factory", "--budget", "1", "--traces", str(traces)]
    return subprocess.run(
        [sys.executable, "-c", CHECK, *command, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_example_holds_without_torch(tmp_path: Path) -> None:
    done = radixkv_check(tmp_path, "--hypothesis-profile", "dev")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "examples.dict_cache:factory [radixkv]: ok" in done.stdout
    # the exploration's floor reaches every situation whatever the budget
    assert "all invariants held, every declared situation reached" in done.stdout
    assert "finding" not in done.stdout
    assert not list(tmp_path.iterdir())  # no trace: nothing was found


def shown_finding() -> str:
    """The finding docs/adapters.md shows the planted bug's run printing."""
    text = (ROOT / "docs" / "adapters.md").read_text()
    blocks = re.findall(r"^```\w*\n(.*?)^```$", text, re.S | re.M)
    (block,) = [b for b in blocks if "finding 1 [" in b]
    return str(block)


def test_the_planted_bug_is_found(tmp_path: Path) -> None:
    done = radixkv_check(tmp_path, "--option", "bug=1")  # the ci profile: derandomized
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "finding 1 [INV-11:evict-locked-victim]" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["examples-dict-cache-factory-1.json"]
    # the adapter guide shows what the command prints (issue 38, item 5: it showed another
    # route's trace); if the kit's exploration changed the trace, copy the new one there
    assert shown_finding() in done.stdout, done.stdout[-1500:]
