"""Adapters that put a cache under the kit: radixkv's own (``radixkv``: RadixCache, its SWA
mode, MambaRadixCache; ``chunk``; ``max_trie``), other engines' (``sglang``) and deliberately
broken ones (``broken``).

Each module exposes factories ``(page_size, host) -> adapter`` and the ``PROFILE`` (or
``PROFILES`` by factory name) they run under, so ``radixkv check
radixkv_conformance.adapters.MODULE:FACTORY`` finds both. Only these modules import torch.
"""
