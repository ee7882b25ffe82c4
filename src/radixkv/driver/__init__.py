"""Driving a cache the way a serving engine does: seeded request traces (``workload``) and
a scheduler that replays them and times the cache calls (``replay``, ``radixkv replay``).

Not part of the cache API: no cache module imports this package, and this package imports
nothing from the conformance kit. A peer cache (sglang's, through the kit's adapter) is
handed in with ``replay.register_cache``.
"""
