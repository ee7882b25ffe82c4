"""The conformance harness: Hypothesis state machines that drive a prefix cache and the spec.

Any implementation runs it through an adapter of plain values (``PrefixCacheAdapter``):
``machine_for("MyCacheMachine", factory).TestCase`` is a pytest/unittest test case.
"""

from stateful.adapter import PrefixCacheAdapter, RadixCacheAdapter, Sizes
from stateful.machines import RadixCacheMachine, machine_for

__all__ = [
    "PrefixCacheAdapter",
    "RadixCacheAdapter",
    "RadixCacheMachine",
    "Sizes",
    "machine_for",
]
