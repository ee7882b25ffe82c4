"""Load vLLM 0.33's prefix cache (``vllm.v1.core``) from its wheel without vLLM's dependencies.

``VLLM_SRC`` names the wheel itself (``vllm-0.33.0-...whl``, imported from the zip) or a
folder holding ``vllm/`` (e.g. the wheel's ``.py`` files unzipped:
``unzip WHEEL 'vllm/*.py' -d DIR``). The packages ``vllm``, ``vllm.distributed`` and
``vllm.multimodal`` are registered bare (their ``__init__`` imports the engine, NCCL and
PIL), then ``block_pool``, ``kv_cache_utils`` and ``single_type_kv_cache_manager`` are imported
unmodified; they need torch, msgspec and pyzmq. Stubs, each for an import unrelated to the
prefix cache (``STUBS``; ``regex`` is stood in by the standard ``re``). Nothing from vLLM is
copied into radixkv.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

from radixkv_conformance.adapters._checkouts import register_shells

ENV = "VLLM_SRC"
_BARE = ("vllm", "vllm.distributed", "vllm.multimodal")
_POOL = "vllm/v1/core/block_pool.py"


def _never(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a stubbed vLLM function was called (radixkv adapters/_vllm_import.py)")


STUBS: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm.config": (
        "the pydantic engine config (sizing helpers' annotations)",
        {"VllmConfig": object},
    ),
    "vllm.config.kv_events": ("the ZMQ event publisher's config", {"KVEventsConfig": object}),
    "vllm.utils.network_utils": (
        "the ZMQ publisher's addresses (needs psutil)",
        {n: _never for n in ("get_ip", "get_tcp_uri", "is_valid_ipv6_address", "split_zmq_path")},
    ),
    "vllm.multimodal.utils": (
        "multimodal windows (needs PIL; only requests with images reach it)",
        {"get_mm_features_in_window": _never},
    ),
    "vllm.utils.torch_utils": ("page sizes in bytes", {"get_dtype_size": _never}),
    "vllm.v1.request": (
        "annotations only (the real Request pulls in sampling, engine, structured output)",
        {"Request": object},
    ),
    "vllm.v1.utils": ("prompt-embeds hashing (needs uvloop)", {"tensor_data": _never}),
    "vllm.v1.metrics.stats": (
        "the metrics collector's event (pulls in CUDA graphs; no collector is passed)",
        {"KVCacheEvictionEvent": object},
    ),
    "cbor2": ("the *_cbor hash variants (sha256 is used)", {"dumps": _never}),
}


def source() -> Path:
    """The wheel or folder named by ``VLLM_SRC``; ``ImportError`` saying how to get one."""
    src = os.environ.get(ENV)
    if not src:
        raise ImportError(
            f"vLLM's prefix cache is loaded without its dependencies: set {ENV} to the vLLM "
            "0.33 wheel (pip download vllm==0.33.0 --no-deps) or a folder holding its vllm/ "
            "(unzip the wheel's 'vllm/*.py')"
        )
    root = Path(src).expanduser()
    if root.is_file() and zipfile.is_zipfile(root):
        with zipfile.ZipFile(root) as wheel:
            if _POOL in wheel.namelist():
                return root
    elif (root / _POOL).is_file():
        return root
    raise ImportError(f"{ENV}={src} is no vLLM wheel or folder holding {_POOL}")


def import_module(name: str) -> Any:
    """Import ``vllm.v1.core.<name>`` from ``VLLM_SRC``, under bare packages and the stubs."""
    full = f"vllm.v1.core.{name}"
    if full in sys.modules:
        return sys.modules[full]
    root = source()
    for module in ("torch", "msgspec", "zmq"):
        try:
            importlib.import_module(module)
        except ImportError as missing:
            raise ImportError(
                f"vLLM's block pool needs torch, msgspec and pyzmq: {missing}"
            ) from None
    register_shells(root, _BARE)
    sys.modules.setdefault("regex", re)
    for stub, (_why, names) in STUBS.items():
        if stub not in sys.modules:
            shell = types.ModuleType(stub)
            shell.__dict__.update(names)
            sys.modules[stub] = shell
    return importlib.import_module(full)
