"""torch, imported once for all of radixkv, without its NumPy warning.

torch's CPU wheel warns at import ("Failed to initialize NumPy") where numpy is absent, and
radixkv never needs numpy. The package imports torch here first (``radixkv/__init__``) with
that one warning ignored, then takes its filter out again: the caller's warning filters stay
as they were, with whatever torch's import added to them. Every module's own ``import
torch`` then finds it imported. The only place radixkv silences the warning.
"""

import warnings
from typing import Any, cast

_filters = cast("list[Any]", warnings.filters)  # a list at run time (typeshed: Sequence)
_before = list(_filters)
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
_ours = _filters[0]
try:
    import torch
finally:
    if _ours not in _before:  # a caller's own copy of this filter stays
        _filters.remove(_ours)

__all__ = ["torch"]
