"""Hours of search on many machines: the kit's machine as a test HypoFuzz fuzzes, and the
example database that carries what it finds back to ``radixkv check``.

``radixkv check`` searches for seconds. For a nightly run of hours, or a fleet of machines,
the kit does not grow a loop of its own: it hands its machine to HypoFuzz, the Hypothesis
project's coverage-guided fuzzer, as a pytest-collectable test::

    # test_my_cache_fuzz.py
    from radixkv_conformance import fuzz_test
    from my_adapter import PROFILE, factory

    TestMyCache = fuzz_test(factory, PROFILE)

    $ pip install './kit[fuzz]'
    $ RADIXKV_DATABASE=.radixkv-fuzz hypothesis fuzz -- test_my_cache_fuzz.py
    $ radixkv check my_adapter:factory --database .radixkv-fuzz  # replays what it found

Every failure HypoFuzz shrinks is stored in the test's example database under the key
Hypothesis gives the machine; ``radixkv check --database`` replays those first, before its
own exploration and search, and reports each as a finding with its trace. The machine's
name (``machine_name``) is what ties the two together: the same cache name in both gives
the same key. Several machines share one database through Hypothesis' own classes (a
directory on a shared disk, or Redis: ``redis://HOST:PORT``).
"""

from __future__ import annotations

import importlib
import os
import unittest
from pathlib import Path
from typing import Any

from hypothesis import settings as Settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from radixkv_conformance.profile import Profile
from radixkv_conformance.protocol import AdapterFactory, require_capabilities
from radixkv_conformance.registry import machine_for, probe_adapter
from radixkv_conformance.search_settings import SLOW_OK

DATABASE_ENV = "RADIXKV_DATABASE"
"""Where ``fuzz_test`` keeps its examples when not told: a directory, or a Redis URL."""


def machine_name(cache: str, kind: str = "Machine") -> str:
    """The machine class name of a cache (``kind``: its search's, or ``Explored``): the
    part of Hypothesis' database key a fuzz run and ``radixkv check`` must share."""
    return ("".join(ch for ch in cache.title() if ch.isalnum()) or "Cache") + kind


def cache_name(factory: AdapterFactory) -> str:
    """A factory's name as ``radixkv check MODULE:FACTORY`` writes it."""
    qualname = getattr(factory, "__qualname__", None) or type(factory).__name__
    module = getattr(factory, "__module__", None)
    return f"{module}:{qualname}" if module else qualname


def fuzz_test(
    factory: AdapterFactory,
    profile: Profile,
    *,
    name: str | None = None,
    database: ExampleDatabase | str | Path | None = None,
) -> type[unittest.TestCase]:
    """The conformance machine of the cache ``factory`` builds, as a test class HypoFuzz
    (``hypothesis fuzz``) and pytest collect: assign it to a ``Test...`` name in a test
    module. ``name`` is the cache's name as ``radixkv check`` gives it (default:
    ``MODULE:FACTORY`` of ``factory``); ``database`` is where examples go (a Hypothesis
    database, a directory or ``redis://HOST:PORT``; default: ``$RADIXKV_DATABASE``, else
    Hypothesis' own default), made the default of the loaded settings profile, since that is
    the one HypoFuzz stores into. The adapter's capabilities are checked now, as
    ``radixkv check`` checks them before any step."""
    _hypofuzz_reads_explain_comments()
    capabilities = require_capabilities(probe_adapter(factory, profile))
    machine = machine_for(
        machine_name(name or cache_name(factory)), factory, profile, capabilities=capabilities
    )
    chosen = open_database(database or os.environ.get(DATABASE_ENV) or None)
    if chosen is not None:  # HypoFuzz stores into the default profile's database
        Settings.register_profile(FUZZ_PROFILE, Settings(), database=chosen, derandomize=False)
        Settings.load_profile(FUZZ_PROFILE)
    test: Any = machine.TestCase
    test.settings = Settings(
        deadline=None,
        derandomize=False,  # HypoFuzz skips derandomized tests: they would draw nothing new
        database=Settings().database,
        suppress_health_check=SLOW_OK,
    )
    return test  # type: ignore[no-any-return]  # Hypothesis types TestCase loosely


FUZZ_PROFILE = "radixkv-fuzz"
"""The Hypothesis settings profile ``fuzz_test`` loads when given a database: HypoFuzz
fuzzes with the default profile's database, whatever a test's own settings say."""


def _hypofuzz_reads_explain_comments() -> None:
    """HypoFuzz 25.11.1 copies ``slice_comments`` off the shrunk result before it stores a
    failure; Hypothesis dropped that field (in 6.158), so the fuzzer died at its first
    failure without storing it (measured: ``hypothesis fuzz`` on ``examples/dict_cache.py``
    with its bug). The explain phase's comments are only printed: no comments is right."""
    # private, with no public route: kit/pyproject.toml bounds Hypothesis to the range tested
    from hypothesis.internal.conjecture.data import ConjectureResult

    if not hasattr(ConjectureResult, "slice_comments"):
        # a frozen slotted class: a class attribute is the only default it can take
        ConjectureResult.slice_comments = property(lambda _: {})  # type: ignore[attr-defined]  # dropped by Hypothesis


def open_database(where: ExampleDatabase | str | Path | None) -> ExampleDatabase | None:
    """A Hypothesis example database: one given as such, a directory (made if absent), or
    ``redis://HOST:PORT`` (with the ``redis`` package); a ``LookupError`` naming what is
    accepted if it cannot be opened or reached."""
    if where is None or isinstance(where, ExampleDatabase):
        return where
    text = str(where)
    if text.startswith(("redis://", "rediss://")):
        return _redis(text)
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise LookupError(f"--database {text}: not a directory ({ACCEPTED})")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LookupError(
            f"--database {text}: cannot make it ({error.strerror}; {ACCEPTED})"
        ) from None
    return DirectoryBasedExampleDatabase(path)


ACCEPTED = "accepted: a directory, or redis://HOST:PORT with the redis package"


def _redis(url: str) -> ExampleDatabase:
    try:
        redis = importlib.import_module("redis")  # optional: hypothesis[redis]
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise LookupError(f"--database {url}: needs the redis package ({ACCEPTED})") from None
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except Exception as error:  # redis' connection errors, a bad URL
        raise LookupError(f"--database {url}: cannot reach it ({error}; {ACCEPTED})") from None
    return RedisExampleDatabase(client)
