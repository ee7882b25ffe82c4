"""Packaged like a library: the spec and the kit import without torch and install without it
(their own wheel), each wheel installs only radixkv's own names, and progress on stderr
knows when stderr is not a terminal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
    "radixkv_conformance.rules.plain",
    "radixkv_conformance.registry",
    "radixkv_conformance.targets",
    "radixkv_conformance.rules.swa",
    "radixkv_conformance.rules.mamba",
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


def build_wheel(project: Path) -> zipfile.ZipFile:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "."],
        cwd=project,
        check=True,
        capture_output=True,
    )
    (wheel,) = project.glob("*.whl")
    return zipfile.ZipFile(wheel)


def metadata(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = (n for n in wheel.namelist() if n.endswith(f".dist-info/{name}"))
    return wheel.read(path).decode()


def requirements(wheel: zipfile.ZipFile) -> list[str]:
    """Requires-Dist lines without an extra: what a plain pip install pulls in."""
    lines = metadata(wheel, "METADATA").splitlines()
    needed = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [req for req in needed if "extra ==" not in req]


def test_two_wheels_one_without_torch(tmp_path: Path) -> None:
    """The cache's wheel installs only `radixkv` (PyPI has unrelated `spec` and `stateful`
    packages) and needs torch; the kit's wheel (kit/) installs the spec and the kit, the
    `radixkv` command, and needs no torch, so an engine without torch installs none."""
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "src", "spec", "stateful", "kit"):
        if (ROOT / part).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.so")
            shutil.copytree(ROOT / part, source / part, ignore=ignore)
        else:
            shutil.copy(ROOT / part, source / part)
    started = time.perf_counter()
    cache, kit = build_wheel(source), build_wheel(source / "kit")

    def tops(wheel: zipfile.ZipFile) -> set[str]:
        return {n.split("/")[0] for n in wheel.namelist() if ".dist-info/" not in n}

    assert tops(cache) == {"radixkv"}
    assert tops(kit) == {"radixkv_spec", "radixkv_conformance"}
    assert [r for r in requirements(cache) if r.startswith("torch")], requirements(cache)
    # numpy only so that `import torch` is quiet (the README's first snippet; issue 38, item 4)
    assert [r for r in requirements(cache) if r.startswith("numpy")], requirements(cache)
    assert not [r for r in requirements(kit) if "torch" in r], requirements(kit)
    assert "radixkv = radixkv_conformance.cli:main" in metadata(kit, "entry_points.txt")
    assert 'radixkv-kit==0.1.0; extra == "kit"' in metadata(cache, "METADATA")
    assert time.perf_counter() - started < 90, "the wheel builds got slow: mark this test slow"


def test_progress_draws_nothing_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("tqdm")
    from radixkv_conformance.progress import Progress

    with Progress("cache") as progress:
        for runs in range(50):
            progress.update(Counter(runs=runs, steps=10 * runs))
    assert "\r" not in capsys.readouterr().err  # captured stderr is not a terminal


def test_the_constraints_pin_what_the_cache_installs() -> None:
    """``constraints.txt`` (the README's install, tox's ``PIP_CONSTRAINT``) pins each of the
    cache's own requirements to one version that its range in pyproject.toml allows."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needs = {(r := Requirement(text)).name: r.specifier for text in project["dependencies"]}
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line.strip() and not line.startswith("#"))
    assert {"torch", "numpy"} <= needs.keys() <= pins.keys(), (needs, pins)
    for name, allowed in needs.items():
        assert allowed.contains(pins[name].strip()), f"{name}=={pins[name]} outside {allowed}"
