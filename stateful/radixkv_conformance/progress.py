"""Progress on stderr while a search runs, through tqdm.

tqdm with ``disable=None`` draws only when stderr is a terminal, so a CI log gets no
carriage-return floods; without tqdm installed (it comes with the ``kit`` extra) there is
simply no progress line.
"""

from __future__ import annotations

import sys
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
