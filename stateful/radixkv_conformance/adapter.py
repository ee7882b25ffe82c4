"""radixkv's RadixCache adapter under its historical name (``radixkv_conformance.adapters.radixkv``
is where it lives). Imports torch: the kit itself does not."""

from radixkv_conformance.adapters.radixkv import RadixCacheAdapter
from radixkv_conformance.profile import RADIXKV
from radixkv_conformance.protocol import FreeSink, PrefixCacheAdapter, Sizes

PROFILE = RADIXKV

__all__ = ["FreeSink", "PrefixCacheAdapter", "RadixCacheAdapter", "Sizes"]
