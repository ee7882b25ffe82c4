"""benchmarks/cuda_check.py, the one-command GPU check, where no GPU is: it must say it
skipped, and its replay part must run on the CPU (``--device cpu``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cuda_check.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: tox -e cuda")
def test_without_a_gpu_it_says_it_checked_nothing() -> None:
    done = run("--no-tests")
    assert done.returncode == 0, done.stderr
    assert "no CUDA device here" in done.stdout and "nothing was checked" in done.stdout
    assert "req/s" not in done.stdout  # no replay ran


def test_its_replays_run_on_the_cpu() -> None:
    done = run("--device", "cpu", "--requests", "8")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 8 x")]
    assert len(rows) == 4  # two configurations, two key forms
    assert all(float(row.split("|")[3].replace(",", "")) > 0 for row in rows)  # req/s
