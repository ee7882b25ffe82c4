"""The events extra is optional: without pyzmq or msgspec, importing the publisher or the
wire codec says what to install (issue 30: it was a bare ``No module named 'zmq'``)."""

from __future__ import annotations

import importlib
import sys

import pytest

HINT = "pip install 'radixkv[events]'"


@pytest.mark.parametrize(
    ("module", "absent", "package"),
    [
        ("radixkv.events.publisher", "zmq", "pyzmq"),
        ("radixkv.events.publisher", "msgspec", "msgspec"),
        ("radixkv.events.wire", "msgspec", "msgspec"),
    ],
)
def test_a_missing_events_dependency_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, module: str, absent: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, absent, None)  # as if not installed: imports fail
    for fresh in ("radixkv.events.publisher", "radixkv.events.wire"):
        monkeypatch.delitem(sys.modules, fresh, raising=False)  # restored after the test
    with pytest.raises(ImportError) as error:
        importlib.import_module(module)
    message = str(error.value)
    assert HINT in message and f"needs {package}" in message, message
    # still what a missing module raises, so ``except ModuleNotFoundError`` and
    # ``pytest.importorskip`` treat it as before, and it names the missing module
    assert isinstance(error.value, ModuleNotFoundError)
    assert error.value.name == absent
