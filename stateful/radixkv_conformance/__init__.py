"""The conformance kit: Hypothesis state machines that drive a prefix cache and the spec.

Any implementation runs it through an adapter of plain values (``PrefixCacheAdapter``) and a
semantic profile (``radixkv_conformance.semantics``) naming what it may do differently::

    report = run_conformance(my_factory, profile=SGLANG)
    report.raise_for_failures()

``machine_for("MyCacheMachine", factory, semantics).TestCase`` is the same machine as a
pytest/unittest test case. Failures are shrunk and kept as replayable JSON traces
(``radixkv_conformance.trace``, FORMAT.md).
"""

from radixkv_conformance.conformance import (
    ConformanceError,
    ConformanceReport,
    Failure,
    run_conformance,
)
from radixkv_conformance.machines import RadixCacheMachine, machine_for
from radixkv_conformance.protocol import (
    AdapterError,
    Evicted,
    Host,
    Inserted,
    Matched,
    PrefixCacheAdapter,
    Sizes,
    require_capabilities,
)
from radixkv_conformance.semantics import (
    CHUNK_CACHE,
    MAX_RADIX_TRIE,
    RADIXKV,
    SEMANTICS,
    SGLANG,
    Semantics,
)

__all__ = [
    "CHUNK_CACHE",
    "MAX_RADIX_TRIE",
    "RADIXKV",
    "SEMANTICS",
    "SGLANG",
    "AdapterError",
    "ConformanceError",
    "ConformanceReport",
    "Evicted",
    "Failure",
    "Host",
    "Inserted",
    "Matched",
    "PrefixCacheAdapter",
    "RadixCacheAdapter",
    "RadixCacheMachine",
    "Semantics",
    "Sizes",
    "machine_for",
    "require_capabilities",
    "run_conformance",
]


def __getattr__(name: str) -> object:
    """``RadixCacheAdapter`` imports torch: loaded only when asked for."""
    if name == "RadixCacheAdapter":
        from radixkv_conformance.adapter import RadixCacheAdapter

        return RadixCacheAdapter
    raise AttributeError(f"module 'radixkv_conformance' has no attribute {name!r}")
