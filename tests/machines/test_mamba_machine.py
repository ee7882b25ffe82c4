"""radixkv's MambaRadixCache through the kit: pages 1, 2, 4."""

from radixkv_conformance.adapters.radixkv import mamba
from radixkv_conformance.profile import RADIXKV_MAMBA
from radixkv_conformance.registry import machine_for

TestMambaRadixCache = machine_for("MambaRadixCacheMachine", mamba, RADIXKV_MAMBA).TestCase
