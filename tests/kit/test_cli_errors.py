"""A usage error of ``radixkv`` is one line and exit status 2, not a traceback; ``--debug``
shows the traceback (issue 30, a new user's first hour, item 9)."""

from __future__ import annotations

import re
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


def test_the_help_offers_no_settings_profile_to_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """``radixkv check --help`` once offered ``--profile ... ci|dev|thorough``, which
    ``--profile`` refuses (issue 38, item 5): those belong to ``--hypothesis-profile``."""
    with pytest.raises(SystemExit) as exited:
        main(["check", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone
    assert "--profile PROFILE an engine's built-in profile, or MODULE:ATTR" in text
    assert not re.search(r"--profile[ =]?[{\[(]?(ci|dev|thorough)\b", text), text
    assert "--hypothesis-profile {ci,dev,thorough}" in text


BROKEN = {
    "syntax.py": "def factory(page_size, host:\n    pass\n",
    "signature.py": "def factory(page_size):\n    return None\n",
    "by_path.py": "def factory(page_size):\n    return None\n",
    "dependency.py": "import radixkv_no_such_dependency\n",
}


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("syntax:factory", "syntax does not import: SyntaxError"),
        ("signature:factory", "did not build an adapter: TypeError: factory() takes 1"),
        ("dependency:factory", "No module named 'radixkv_no_such_dependency'"),
        ("{folder}/by_path.py:factory", "did not build an adapter: TypeError"),
    ],
)
def test_a_broken_adapter_is_one_line_and_status_4(
    target: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A CI gating on the kit tells "my adapter did not load" (4) from a finding (1) and
    from a mistake of the command line (2) (issue 38, item 2)."""
    for name, text in BROKEN.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    status = main(["check", target.format(folder=tmp_path), "--traces", str(tmp_path / "t")])
    assert status == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert said in err[-1] and "the adapter is broken" in err[-1], err
    assert not any("Traceback" in line for line in err)


def test_an_adapter_file_path_is_a_target(tmp_path: Path) -> None:
    """``radixkv check ./my_adapter.py:factory`` loads the file: its folder goes first on
    ``sys.path`` so that its own imports of its neighbours work."""
    (tmp_path / "neighbour_of_the_adapter.py").write_text("SIZE = 3\n")
    (tmp_path / "file_adapter.py").write_text(
        "from neighbour_of_the_adapter import SIZE\n\ndef factory(page_size, host):\n"
        "    return SIZE\n"
    )
    from radixkv_conformance.targets import load

    factory, declared = load(f"{tmp_path}/file_adapter.py:factory")
    assert factory(1, None) == 3 and declared is None
    with pytest.raises(LookupError, match="no such file"):
        load(f"{tmp_path}/missing.py:factory")


def test_an_option_the_factory_does_not_take_stays_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", TRIE, "--option", "nope=1"])
    assert exited.value.code == 2
    assert "takes no such --option" in capsys.readouterr().err
