"""radixkv's RadixCache with a sliding window through the kit: W in {1, 2, 4, 8}, pages 1, 4."""

from radixkv_conformance.adapters.radixkv import sliding_window
from radixkv_conformance.profile import RADIXKV_SWA
from radixkv_conformance.registry import machine_for

TestSlidingWindow = machine_for("SlidingWindowMachine", sliding_window, RADIXKV_SWA).TestCase
