"""A mutant's private copy of ``src/`` and the environment that imports it (both modes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mutation.mutants import Mutant

ROOT = Path(__file__).resolve().parent.parent


BASELINE = Mutant("baseline", "src/radixkv/__init__.py", "", "")


def apply(mutant: Mutant, workdir: Path) -> Path:
    """Copy ``src/`` into ``workdir`` with the mutant's one change; return the new src."""
    src = workdir / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    target = src / Path(mutant.path).relative_to("src")
    text = target.read_text()
    if mutant is BASELINE:
        return src
    found = text.count(mutant.old)
    if found != 1:
        raise SystemExit(f"mutant {mutant.name}: its text occurs {found} times in {mutant.path}")
    target.write_text(text.replace(mutant.old, mutant.new))
    return src


def environment(mutant: Mutant, src: Path) -> dict[str, str]:
    """The environment that runs against the mutated copy ``src``: checked to import it."""
    env = {
        **os.environ,
        # this checkout's spec and kit too, not whatever copy an environment installed
        "PYTHONPATH": os.pathsep.join(map(str, (src, ROOT / "spec", ROOT / "stateful", ROOT))),
        "HYPOTHESIS_PROFILE": "mutation",
        # The mutants are of the Python reference; a compiled helper built in place
        # (setup.py build_ext --inplace) would bypass the list-key path they change.
        "RADIXKV_PURE": "1",
    }
    probe = [sys.executable, "-c", "import radixkv; print(radixkv.__file__)"]
    where = subprocess.run(probe, env=env, capture_output=True, text=True)
    if where.returncode:
        error = where.stderr.strip().splitlines()[-1:]
        raise SystemExit(f"mutant {mutant.name} does not even import: {error}")
    if not where.stdout.startswith(str(src)):
        raise SystemExit(f"the mutated copy is not the one imported: {where.stdout}")
    return env
