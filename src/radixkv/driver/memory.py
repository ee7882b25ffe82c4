"""Resident memory: the RSS readings a replay reports, and ``bytes_per_token`` (what a cache
keeps per cached token, measured by building it without eviction)."""

from __future__ import annotations

import gc
import os
import resource
import sys
from array import array

from radixkv.driver.caches import CACHES
from radixkv.driver.pool import ReplayPool
from radixkv.driver.workload import WorkloadConfig, generate


def rss() -> int:
    """The resident set now, in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak is the best we have
        return max_rss()


def max_rss() -> int:
    """The peak resident set so far (``ru_maxrss``), in bytes."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def trim() -> None:
    """Hand freed heap back to the system (glibc's ``malloc_trim``), where there is one."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def bytes_per_token(cache_name: str, cfg: WorkloadConfig, page_size: int = 1) -> dict[str, float]:
    """Resident memory per cached token, no eviction: RSS delta of building the cache.

    The trace is generated first as compact arrays; each key handed to the cache is built
    fresh (new int objects for a list, else a new array), so whatever the
    cache keeps of it is counted. Run it in a fresh process for a clean figure
    (``python -m radixkv.driver.drive --memory CACHE``).
    """
    trace = [(array("q", r.full()), r.extra_key) for r in generate(cfg)]
    pool = ReplayPool(sum(len(a) for a, _ in trace))
    cache = CACHES[cache_name](page_size, pool)
    gc.collect()
    trim()
    rss0 = rss()
    for arr, extra_key in trace:
        key = cache.prepare(arr.tolist())  # fresh: a new list of new ints, or a new array
        value = pool.alloc(len(arr))
        cache.insert(key, extra_key, value)
        del key, value
    gc.collect()
    trim()
    grown = rss() - rss0
    cached = cache.total_size()
    return {"bytes": grown, "cached_tokens": cached, "bytes_per_token": grown / cached}
