"""sglang 0.5.23's Python ``RadixCache`` with its own KV event recorder turned on.

    pip install --no-deps sglang==0.5.23 && pip install msgspec pyzmq
    radixkv check radixkv_conformance.adapters.sglang_events:factory

The plain sglang adapter (``sglang.py``) stubs ``sglang.srt.disaggregation.kv_events``:
events are off there. Here the real module is loaded (it needs ``msgspec`` and ``zmq``; it
also imports ``pydantic`` for its publisher configuration classes and a network helper,
neither of which the recorder calls, so those two are inert stand-ins when absent), then
sglang's recorder module and its tree are reloaded against it. The cache is built with
``enable_kv_cache_events=True``; ``take_events`` hands the kit each record exactly as sglang
puts it on the wire: msgspec's msgpack encoding of sglang's own event class, decoded to
plain values — a map tagged ``type`` with sglang's field names (``cache_salt`` is the
namespace), which the kit reads by name.

sglang's page hashes are its own (``event_hashes="opaque"``): the kit checks them as names
and compares pages by token path. In the ``None`` namespace they happen to equal radixkv's
(both chain SHA-256 over 4-byte little-endian ids); namespaces are not part of the hash
unless the namespace is a registered LoRA adapter.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import msgspec

from radixkv_conformance.adapters import sglang as python_tree
from radixkv_conformance.adapters._calls import HostFrees
from radixkv_conformance.adapters._sglang_import import Stub
from radixkv_conformance.profile import SGLANG
from radixkv_conformance.protocol import Host

_KV_EVENTS = "sglang.srt.disaggregation.kv_events"


def _load_recorder() -> Any:
    """The tree module, reloaded over sglang's real event classes and recorder."""
    tree = python_tree.radix_cache
    if getattr(sys.modules.get(_KV_EVENTS), "__file__", None):
        return tree  # already loaded for real
    package = "sglang.srt.disaggregation"
    if package not in sys.modules:
        shell = types.ModuleType(package)
        shell.__path__ = [str(Path(tree.__file__).parents[1] / "disaggregation")]
        sys.modules[package] = shell
    if "pydantic" not in sys.modules and importlib.util.find_spec("pydantic") is None:
        stand_in = types.ModuleType("pydantic")  # the publisher's config classes: never built
        stand_in.BaseModel = type("BaseModel", (), {})  # type: ignore[attr-defined]  # a stand-in module
        sys.modules["pydantic"] = stand_in
    network = "sglang.srt.utils.network"  # the publisher's addresses: never called
    sys.modules.setdefault(network, Stub(network))
    _require_native_hash(Path(tree.__file__).parents[1] / "utils")
    sys.modules.pop(_KV_EVENTS, None)
    importlib.import_module(_KV_EVENTS)
    importlib.reload(sys.modules["sglang.srt.mem_cache.events"])
    return importlib.reload(tree)


def _require_native_hash(utils_dir: Path) -> None:
    """sglang hashes event pages with a C++ extension it builds on first use (torch JIT).

    The plain adapter stubs ``sglang.srt.utils``; the extension's loader lives below it, so
    the stub gets the package's path. Where the build fails (no compiler, no OpenSSL
    headers) this adapter cannot run: an ImportError, so its vectors skip with the reason.
    """
    utils = sys.modules.get("sglang.srt.utils")
    if utils is not None and not hasattr(utils, "__path__"):
        utils.__path__ = [str(utils_dir)]
    native = importlib.import_module("sglang.srt.mem_cache.cpp_utils.native_hash")
    try:
        native._load_native_hash_module()
    except RuntimeError as exc:
        raise ImportError(f"sglang's native page-hash extension did not build: {exc}") from exc


radix_cache = _load_recorder()


PROFILE = SGLANG  # event_hashes="opaque": sglang's hashes are its own


class SglangEventsAdapter(python_tree.SglangRadixCacheAdapter):
    """sglang's RadixCache with ``enable_kv_cache_events=True``; ``take_events`` drains it."""

    capabilities = python_tree.SglangRadixCacheAdapter.capabilities | {"events"}

    def __init__(self, page_size: int, host: Host) -> None:
        self.page_size = page_size
        self.cache = radix_cache.RadixCache.create_simulated(
            mock_allocator=HostFrees(host),
            page_size=page_size,
            enable_kv_cache_events=True,
        )
        self.cache.take_events()  # the AllBlocksCleared of its constructor's reset

    def take_events(self) -> list[Any]:
        return [_wire(event) for event in self.cache.take_events()]


def _wire(event: Any) -> Any:
    """sglang's record as it travels: its msgpack bytes, decoded without a schema."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(event))


def factory(page_size: int, host: Host) -> SglangEventsAdapter:
    return SglangEventsAdapter(page_size, host)
