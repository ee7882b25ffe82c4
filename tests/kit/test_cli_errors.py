"""A usage error of ``radixkv`` is one line and exit status 2, not a traceback; ``--debug``
shows the traceback (issue 30, a new user's first hour, item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from radixkv_conformance.cli import main

TRIE = "radixkv_conformance.adapters.page_trie:factory"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["no_such_module:factory"], "No module named 'no_such_module' (is the adapter's folder"),
        ([TRIE, "--option", "bugs=zzz"], "ValueError: unknown bugs ['zzz']; known:"),
        (["--replay", "{missing}"], "FileNotFoundError"),
        (["--replay", "{not_json}"], "JSONDecodeError"),
    ],
)
def test_a_usage_error_is_one_line_and_status_2(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "not.json").write_text("a trace? no\n")
    paths = {"missing": tmp_path / "missing.json", "not_json": tmp_path / "not.json"}
    args = [arg.format(**paths) for arg in args]
    with pytest.raises(SystemExit) as exited:
        main(["check", *args, "--traces", str(tmp_path / "traces")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "(--debug shows where)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3


def test_debug_shows_the_traceback() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        main(["check", "no_such_module:factory", "--debug"])


def test_profile_names_an_engines_policies_not_how_long_to_search(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", TRIE, "--profile", "ci"])
    assert exited.value.code == 2
    assert "--hypothesis-profile ci" in capsys.readouterr().err
