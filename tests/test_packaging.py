"""Packaged like a library: the spec and the kit import without torch, the wheel installs
only radixkv's own names, and progress on stderr knows when stderr is not a terminal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT_MODULES = (
    "radixkv_spec",
    "radixkv_spec.model",
    "radixkv_spec.swa",
    "radixkv_spec.mamba",
    "radixkv_spec.policies",
    "radixkv_conformance",
    "radixkv_conformance.protocol",
    "radixkv_conformance.profile",
    "radixkv_conformance.machines",
    "radixkv_conformance.strategies",
    "radixkv_conformance.plain_rules",
    "radixkv_conformance.registry",
    "radixkv_conformance.targets",
    "radixkv_conformance.swa_rules",
    "radixkv_conformance.mamba_rules",
    "radixkv_conformance.trace",
    "radixkv_conformance.replay",
    "radixkv_conformance.cli",
)
NO_TORCH = f"""
import sys
sys.modules["torch"] = None  # any import of torch now raises ImportError
import importlib
for name in {KIT_MODULES!r}:
    importlib.import_module(name)
from radixkv_conformance.cli import main
try:
    main(["check", "--help"])
except SystemExit as done:
    assert done.code == 0, done.code
print("imported without torch")
"""


def test_the_spec_and_the_kit_import_without_torch() -> None:
    paths = os.pathsep.join(str(ROOT / folder) for folder in ("spec", "stateful"))
    env = {**os.environ, "PYTHONPATH": paths}
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "imported without torch" in done.stdout


def test_the_wheel_installs_only_radixkvs_own_names(tmp_path: Path) -> None:
    """PyPI has unrelated `spec` and `stateful` packages: the wheel must not install them."""
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "src", "spec", "stateful"):
        if (ROOT / part).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(ROOT / part, source / part, ignore=ignore)
        else:
            shutil.copy(ROOT / part, source / part)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "."],
        cwd=source,
        check=True,
        capture_output=True,
    )
    (wheel,) = source.glob("radixkv-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops - {"radixkv-0.1.0.dist-info"} == {"radixkv", "radixkv_spec", "radixkv_conformance"}
    assert time.perf_counter() - started < 60, "the wheel build got slow: mark this test slow"


def test_progress_draws_nothing_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("tqdm")
    from radixkv_conformance.progress import Progress

    with Progress("cache") as progress:
        for runs in range(50):
            progress.update(Counter(runs=runs, steps=10 * runs))
    assert "\r" not in capsys.readouterr().err  # captured stderr is not a terminal
