"""Adapters that put a cache under the conformance machine: radixkv's own and other engines'.

Each module exposes a ``factory(page_size, free_sink) -> PrefixCacheAdapter`` and the
``SEMANTICS`` profile it runs under, so ``radixkv check stateful.adapters.MODULE:factory``
finds both.
"""
