"""Driving a cache the way a serving engine does: seeded request traces (``workload``) and
a scheduler that replays them and times the cache calls (``radixkv drive``).

``pool`` the reference KV pool; ``caches`` the adapters a replay drives (``CACHES``,
``register_cache``, ``sglang_factory``); ``report`` the results; ``memory`` the RSS readings
and ``bytes_per_token``; ``scheduler`` the scheduler and ``replay``; ``sweep`` the sweeps and
plots; ``drive`` the command line (``radixkv drive``), above them all (it re-exports their
names).

Not part of the cache API: no cache module imports this package, and this package imports
nothing from the conformance kit. A peer cache (sglang's, through the kit's adapter) is
handed in with ``drive.register_cache``.
"""
