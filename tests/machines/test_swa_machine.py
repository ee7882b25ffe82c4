"""The SWA machine: RadixCache(sliding_window_size=W), W in {1, 2, 4, 8}, pages 1 and 4."""

from radixkv_conformance.swa_machine import swa_machine

TestSlidingWindow = swa_machine().TestCase
