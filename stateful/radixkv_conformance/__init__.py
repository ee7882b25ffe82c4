"""The conformance kit: Hypothesis state machines that drive a prefix cache and the spec.

Any implementation runs it through an adapter of plain values (``radixkv_conformance.protocol``:
a core ``PrefixCacheAdapter`` plus the capabilities it declares) and a profile of policies
(``radixkv_conformance.profile``) naming what it may do differently::

    report = run_conformance(my_factory, profile=SGLANG)
    report.raise_for_failures()

``machine_for("MyCacheMachine", factory, profile).TestCase`` is the same machine as a
pytest/unittest test case. Every distinct finding is shrunk and kept as a replayable JSON
trace (``radixkv_conformance.trace``, FORMAT.md). Nothing here imports torch; only the
adapters of torch-based caches do (``radixkv_conformance.adapters``).
"""

from radixkv_conformance.conformance import (
    ConformanceError,
    ConformanceReport,
    run_conformance,
)
from radixkv_conformance.findings import Failure, Finding
from radixkv_conformance.fuzz import fuzz_test
from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.minimize import minimize
from radixkv_conformance.profile import (
    CHUNK_CACHE,
    MAX_RADIX_TRIE,
    PROFILES,
    RADIXKV,
    RADIXKV_MAMBA,
    RADIXKV_SWA,
    SGLANG,
    Profile,
)
from radixkv_conformance.protocol import (
    CAPABILITIES,
    AdapterBroken,
    AdapterError,
    Evicted,
    Host,
    Inserted,
    Matched,
    NoRoom,
    NotAdmitted,
    PrefixCacheAdapter,
    Sizes,
    require_capabilities,
)
from radixkv_conformance.registry import machine_for

__all__ = [
    "CAPABILITIES",
    "CHUNK_CACHE",
    "MAX_RADIX_TRIE",
    "PROFILES",
    "RADIXKV",
    "RADIXKV_MAMBA",
    "RADIXKV_SWA",
    "SGLANG",
    "AdapterBroken",
    "AdapterError",
    "ConformanceError",
    "ConformanceMachine",
    "ConformanceReport",
    "Evicted",
    "Failure",
    "Finding",
    "Host",
    "Inserted",
    "Matched",
    "NoRoom",
    "NotAdmitted",
    "PrefixCacheAdapter",
    "Profile",
    "Sizes",
    "fuzz_test",
    "machine_for",
    "minimize",
    "require_capabilities",
    "run_conformance",
]


def __getattr__(name: str) -> object:
    """``RadixCacheAdapter`` imports torch: loaded only when asked for."""
    if name == "RadixCacheAdapter":
        from radixkv_conformance.adapters.radixkv import RadixCacheAdapter

        return RadixCacheAdapter
    raise AttributeError(f"module 'radixkv_conformance' has no attribute {name!r}")
