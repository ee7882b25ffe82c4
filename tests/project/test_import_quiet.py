"""``import radixkv`` prints nothing (issue 30, first hour, item 10). torch's CPU wheel warns
"Failed to initialize NumPy" at import where numpy is absent; radixkv imports torch once, in
``radixkv/_torch.py``, with that warning ignored, and leaves the warning filters as a bare
``import torch`` leaves them (torch's own filters in, radixkv's out)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

NO_NUMPY = 'import sys; sys.modules["numpy"] = None  # as where numpy is not installed\n'
ADDED = """
import warnings
before = list(warnings.filters)
import {modules}
print([f for f in warnings.filters if f not in before])  # the filters the import added
"""
RADIXKV = ADDED.format(modules="radixkv, radixkv.driver.drive")
TORCH = ADDED.format(modules="torch")


def python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that shows every warning (``-W default``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("numpy", ["as-installed", "absent"])
def test_import_radixkv_prints_nothing_and_keeps_the_filters(numpy: str) -> None:
    setting = NO_NUMPY if numpy == "absent" else ""
    bare = python(setting + TORCH)
    if numpy == "absent" and "Failed to initialize NumPy" not in bare.stderr:
        pytest.skip(f"this torch does not warn without numpy: {bare.stderr[-500:]!r}")
    done = python(setting + RADIXKV)
    assert (done.returncode, done.stderr) == (0, "")
    assert bare.returncode == 0, bare.stderr[-2000:]
    assert done.stdout == bare.stdout  # torch's filters stay; radixkv's own is gone
