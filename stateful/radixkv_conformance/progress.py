"""Progress on stderr while a search runs, through tqdm.

tqdm with ``disable=None`` draws only when stderr is a terminal, so a CI log gets no
carriage-return floods; without tqdm installed (it comes with the ``kit`` extra) there is
simply no progress line.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from types import TracebackType
from typing import Any


class Progress:
    """A progress bar counting runs, showing steps and invariant checks."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None

    def __enter__(self) -> Progress:
        try:
            from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type hints
        except ImportError:
            return self
        self.bar = tqdm(desc=self.label, unit=" runs", file=sys.stderr, disable=None, leave=False)
        return self

    def update(self, stats: Counter[str]) -> None:
        if self.bar is None:
            return
        self.bar.n = stats["runs"]
        self.bar.set_postfix(steps=stats["steps"], checks=stats["invariant checks"], refresh=False)
        self.bar.refresh()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.bar is not None:
            self.bar.close()


class Stages:
    """One line on stderr per stage of a cache's check (its exploration's stages, each
    search), with the time left of its budget: what a user sees from the first second,
    progress bar or not."""

    def __init__(self, label: str, budget: float | None, progress: Progress | None = None):
        self.label, self.budget, self.progress = label, budget, progress
        self.started = time.perf_counter()

    def __call__(self, stage: str) -> None:
        line = f"{self.label}: {stage}"
        if self.budget is not None:
            left = max(0.0, self.budget - (time.perf_counter() - self.started))
            line += f" ({left:.0f}s of {self.budget:g}s left)"
        bar = self.progress.bar if self.progress is not None else None
        if bar is not None:
            bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)
