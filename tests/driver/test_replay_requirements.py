"""``radixkv drive`` checks what each cache it will replay needs before any work (issue 30,
first hour, item 3): with sglang absent, ``--compare sglang`` used to replay radixkv, sweep it,
and only then die in a 45-line traceback. Now a missing module is one line on stderr naming
what installs it, status 2, and nothing on stdout (no trace was replayed)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
from radixkv_conformance import cli
from radixkv_conformance.cli import main

from radixkv.driver import caches
from radixkv.driver.caches import CACHES, SGLANG_WHEEL, installed, missing_requirements
from radixkv.events import EXTRA_HINT

TINY = ["drive", "--requests", "24", "--prompt-len", "64", "--no-progress"]


def absent(*modules: str) -> Callable[[str], bool]:
    """``installed`` as on a machine without ``modules``."""
    return lambda module: module not in modules and installed(module)


@pytest.fixture
def registry() -> Iterator[None]:
    """``CACHES`` as it was: a MODULE:FACTORY peer registers itself."""
    before = dict(CACHES)
    yield
    CACHES.clear()
    CACHES.update(before)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main([*TINY, *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_import_check_finds_modules_without_importing_them() -> None:
    assert installed("json") and not installed("radixkv_no_such_module")
    assert missing_requirements("radixkv") == []  # radixkv's own caches need nothing more


@pytest.mark.parametrize(
    "args",
    [["--plot", "sweep.png", "--compare", "sglang"], ["--cache", "sglang"]],
    ids=["compare", "cache"],
)
def test_a_missing_sglang_stops_the_replay_before_any_work(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caches, "installed", absent("sglang"))
    status, out, err = run(capsys, *args)
    assert status == 2
    assert out == ""  # no trace replayed, no sweep
    assert err.count("\n") == 1 and "Traceback" not in err
    flag = args[-2]
    assert err == f"radixkv drive: {flag} sglang needs sglang, not installed: {SGLANG_WHEEL}\n"


def test_with_sglang_installed_the_check_lets_it_through(monkeypatch: pytest.MonkeyPatch) -> None:
    cli._parser()  # registers "sglang" (the kit's adapter), as `radixkv drive` does
    monkeypatch.setattr(caches, "installed", lambda module: True)
    assert missing_requirements("sglang") == []
    monkeypatch.setattr(caches, "installed", absent("sglang"))
    assert missing_requirements("sglang") == [("sglang", SGLANG_WHEEL)]


def test_a_peer_by_module_and_factory_names_what_it_lacks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, registry: None
) -> None:
    """sglang's Rust core (benchmarks.sglang_peers) imports sglang, msgspec and numpy on its
    first call: the check reads its ``requires`` and names each one missing."""
    # sglang present (tests-pure's env has no sglang wheel), msgspec and numpy not
    monkeypatch.setattr(caches, "installed", lambda module: module not in ("msgspec", "numpy"))
    peer = "benchmarks.sglang_peers:SglangRustReplay"
    status, out, err = run(capsys, "--plot", "sweep.png", "--compare", peer)
    assert (status, out) == (2, "")
    assert err == (
        "radixkv drive: --compare sglang-rust needs msgspec, numpy, not installed: "
        "pip install msgspec; pip install numpy\n"
    )


def test_a_peer_module_that_does_not_import_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, "--plot", "sweep.png", "--compare", "radixkv_no_such:F")
    assert (status, out) == (2, "")
    assert err == (
        "radixkv drive: --compare: radixkv_no_such:F: cannot import radixkv_no_such "
        "(No module named 'radixkv_no_such')\n"
    )


def test_the_former_name_still_drives_and_names_the_new_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``radixkv replay`` was this command's name until ``radixkv check --replay`` (a
    finding's trace) took the word: it still drives, and says what it is called now."""
    status = main(["replay", *TINY[1:]])
    out, err = capsys.readouterr()
    assert status == 0 and "hit rate" in out.lower()
    assert "radixkv replay is now radixkv drive" in err


def test_an_unknown_compare_cache_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``--compare nosuch`` was a bare message and status 1 (issue 38, item 5): now one line
    with the command's prefix and status 2, as every other usage error of ``radixkv drive``."""
    status, out, err = run(capsys, "--plot", "sweep.png", "--compare", "nosuch")
    assert (status, out) == (2, "")
    assert err.startswith("radixkv drive: --compare: unknown cache 'nosuch': one of [")
    assert err.endswith(" or MODULE:FACTORY\n") and err.count("\n") == 1


def without_the_events_extra(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """As where ``module`` (msgspec or zmq) is not importable: radixkv's modules that import
    it are dropped, so the next import of them meets the absence."""
    monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules: an import fails
    for name in ("radixkv.events.wire", "radixkv.events.publisher"):
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.parametrize(("module", "package"), [("msgspec", "msgspec"), ("zmq", "pyzmq")])
def test_events_without_the_extra_is_one_line_before_any_work(
    module: str, package: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--events`` without msgspec printed the trace's header, then its hint twice in one
    line, and exited 1 (issue 38, item 5): now the hint once, before anything, status 2, as
    a missing peer (``--compare sglang``) or the kit missing from ``radixkv check``."""
    without_the_events_extra(monkeypatch, module)
    status, out, err = run(capsys, "--events", "tcp://127.0.0.1:0", "--events-wait", "0")
    assert (status, out) == (2, "")  # no trace header, nothing replayed
    assert err == f"radixkv drive: --events needs {package}, not installed: {EXTRA_HINT}\n"


def test_events_whose_extra_is_found_but_does_not_import_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module that is found but fails to import (a broken install) is said once too."""
    without_the_events_extra(monkeypatch, "msgspec")
    monkeypatch.setattr(caches, "installed", lambda module: True)  # found, yet not importable
    status, out, err = run(capsys, "--events", "tcp://127.0.0.1:0", "--events-wait", "0")
    assert (status, out) == (2, "")
    assert err.startswith("radixkv drive: --events: radixkv.events.wire needs msgspec")
    assert err.count(EXTRA_HINT) == 1 and err.count("\n") == 1
