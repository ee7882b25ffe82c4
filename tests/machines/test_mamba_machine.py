"""The Mamba machine: radixkv's MambaRadixCache against spec.mamba, page sizes 1, 2, 4."""

from __future__ import annotations

from radixkv_conformance.mamba_machine import RadixKVMambaAdapter, mamba_machine_for

TestMambaRadixCache = mamba_machine_for("MambaRadixCacheMachine", RadixKVMambaAdapter).TestCase
