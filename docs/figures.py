"""Regenerate the site's figures from the commands that print them.

    python docs/figures.py                     # every figure (several minutes on 2 cores)
    python docs/figures.py states exhaustive   # some of them
    python docs/figures.py check --budget 30   # radixkv check's budget per cache (default: its own)

Each figure is a Markdown file in ``docs/figures/`` that a page of the site includes. It is
headed by the command that printed it, when it ran, on which commit and machine (CPUs, load,
Python, torch, Hypothesis, which key path) and what it cost (wall and CPU seconds, exit
status); below that, the command's own table (``--states``) or one built from the lines it
printed, nothing typed by hand. The commands run against this checkout: its ``src``,
``spec`` and ``stateful`` come first on ``PYTHONPATH``, whatever else is installed. Run it
on a clean checkout (the header says when the tree had uncommitted changes), then commit
what it wrote.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "figures"
CLI = "from radixkv_conformance.cli import main; raise SystemExit(main())"
PROBE = """
import hypothesis, torch
try:
    from radixkv import native
    keys = "compiled" if native.helpers is not None else "pure Python"
except Exception:
    keys = "unknown"
print(f"torch {torch.__version__}, Hypothesis {hypothesis.__version__}, {keys} key helpers")
"""


@dataclass(frozen=True)
class Run:
    """What one command printed, and what it cost."""

    args: tuple[str, ...]
    stdout: str
    status: int
    wall: float
    cpu: float
    started: datetime
    load: float

    @property
    def command(self) -> str:
        return "radixkv " + " ".join(self.args)


def environment() -> dict[str, str]:
    """The caller's environment with this checkout first on ``PYTHONPATH``, and the search
    settings the commands' defaults give (no ``HYPOTHESIS_PROFILE``, no ``RADIXKV_PURE``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "RADIXKV_PURE")}
    ours = [str(ROOT / part) for part in ("src", "spec", "stateful")] + [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join([*ours, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(args: Sequence[str], cwd: Path | None = None) -> Run:
    """``radixkv ARGS`` run by this interpreter from ``cwd`` (default: a fresh temporary
    folder, where any trace it writes is left behind)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started, load = datetime.now(UTC), os.getloadavg()[0]
    clock = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [sys.executable, "-c", CLI, *args],
            cwd=cwd or scratch,
            env=environment(),
            capture_output=True,
            text=True,
            check=False,
        )
    wall = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 3):  # 3: held, some situation unreached (said in the table)
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"radixkv {' '.join(args)} exited {done.returncode}")
    return Run(tuple(args), done.stdout, done.returncode, wall, cpu, started, load)


def machine() -> str:
    """CPUs, Python, and what the commands import (asked of a child with their environment)."""
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment(), capture_output=True, text=True
    )
    imports = probe.stdout.strip() or "torch or Hypothesis not importable"
    cpus = os.cpu_count() or 0
    return f"{cpus} CPUs ({cpu_model()}), Python {platform.python_version()}, {imports}"


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return found.group(1).strip() if found else platform.machine()


def commit() -> str:
    """This checkout's commit, and whether the code the commands run had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "src", "spec", "stateful", "kit")
    return f"{head} with uncommitted changes to the code" if dirty else head


def header(run: Run, where: str, note: str = "") -> str:
    when = run.started.strftime("%Y-%m-%d %H:%M UTC")
    said = f" {note}" if note else ""
    return (
        "<!-- Written by docs/figures.py: do not edit by hand; run it again. -->\n"
        f"Printed by `{run.command}` on {when}, at commit {where}.{said} "
        f"Exit status {run.status}; {run.wall:.0f} s wall, {run.cpu:.0f} s CPU; "
        f"load average {run.load:.1f} at the start.\n"
    )


def printed_table(out: str, head: str) -> str:
    """The last Markdown table in ``out`` whose header row starts with ``head``, as printed."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(head)]
    if not starts:
        raise ValueError(f"no table starting {head!r} in the command's output")
    rows = []
    for line in lines[starts[-1] :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def states_table(out: str) -> str:
    """The table ``radixkv check --states`` prints last."""
    return printed_table(out, "| cache | bounds |")


def policies_table(out: str) -> str:
    """The hit-rate table ``radixkv drive --policy-plot`` prints."""
    return printed_table(out, "| pool (tokens) |")


SEQUENCES = re.compile(
    r"^(?P<name>\S.*?): (?P<verdict>ok|FAILED \(\d+ findings?\)) — (?P<sequences>\d+) sequences"
    r" up to (?P<depth>\d+) steps in (?P<seconds>[\d.]+)s \((?P<rate>\d+)/s,"
    r" (?P<steps>\d+) steps run, fork=(?P<fork>\w+)"
)


def exhaustive_table(out: str) -> str:
    """One row per cache from ``radixkv check --exhaustive N``'s report lines."""
    lines = out.splitlines()
    rows = [
        "| cache | result | sequences | by length | steps run | seconds |",
        "|---|---|---:|---|---:|---:|",
    ]
    for i, line in enumerate(lines):
        found = SEQUENCES.match(line)
        if found:
            lengths = lines[i + 1].strip() if i + 1 < len(lines) else ""
            rows.append(
                f"| {found['name']} | {found['verdict']} | {int(found['sequences']):,} "
                f"| {lengths} | {int(found['steps']):,} | {float(found['seconds']):.1f} |"
            )
    if len(rows) == 2:
        raise ValueError("no report line in the output of radixkv check --exhaustive")
    total = next((line for line in lines if line.startswith("exhaustive, up to")), "")
    return "\n".join(rows) + (f"\n\nIn all: {total.removeprefix('exhaustive, ')}." if total else "")


REPORT = re.compile(
    r"^(?P<name>\S.*?) \[(?P<profile>[^\]]+)\]: (?P<verdict>.+) in (?P<seconds>[\d.]+)s — "
    r"runs (?P<runs>\d+), steps (?P<steps>\d+), invariant checks (?P<checks>\d+), "
    r"searches (?P<searches>\d+)(?P<budget>, stopped at its time budget)?$"
)
SITUATION = re.compile(r"^\s+situation \S+\s+(?P<count>\d+)")
EXPLORED = re.compile(
    r"^\s+explored breadth first: \d+ states, (?P<transitions>\d+) transitions in "
    r"(?P<seconds>[\d.]+)s"
)


def check_table(out: str) -> str:
    """One row per cache from ``radixkv check``'s reports: the first line of each, its
    situations (declared, reached) and the checker's own speed: the exploration's
    transitions a second, the search's steps a second (its steps over the seconds the
    exploration left it)."""
    rows = [
        "| cache | profile | result | runs | steps | invariant checks | searches "
        "| situations reached | transitions/s (exploration) | steps/s (search) | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    current: dict[str, str] | None = None
    reached = declared = transitions = 0
    exploring = 0.0

    def close() -> None:
        if current is not None:
            spent = " (budget spent)" if current["budget"] else ""
            seconds = float(current["seconds"])
            explored = f"{transitions / exploring:,.0f}" if exploring else "-"
            searched = max(seconds - exploring, 1e-9)
            rows.append(
                f"| {current['name']} | {current['profile']} | {current['verdict']} "
                f"| {int(current['runs']):,} | {int(current['steps']):,} "
                f"| {int(current['checks']):,} | {current['searches']}{spent} "
                f"| {reached} of {declared} | {explored} "
                f"| {int(current['steps']) / searched:,.0f} | {seconds:.1f} |"
            )

    for line in out.splitlines():
        found = REPORT.match(line)
        if found:
            close()
            current = {k: v or "" for k, v in found.groupdict().items()}
            reached = declared = transitions = 0
            exploring = 0.0
        elif current is not None and (situation := SITUATION.match(line)):
            declared += 1
            reached += int(situation["count"]) > 0
        elif current is not None and (stage := EXPLORED.match(line)):
            transitions += int(stage["transitions"])
            exploring += float(stage["seconds"])
    close()
    if len(rows) == 2:
        raise ValueError("no report in the output of radixkv check")
    said = next((line for line in out.splitlines() if line.startswith("radixkv check: ")), "")
    return "\n".join(rows) + (f"\n\n{said.removeprefix('radixkv check: ')}." if said else "")


@dataclass(frozen=True)
class Figure:
    """A command and how its output becomes the figure's table."""

    args: Callable[[argparse.Namespace], list[str]]
    table: Callable[[str], str]
    note: Callable[[argparse.Namespace], str] = lambda _: ""


POLICY_PLOT = ("--policy-plot", "policies.png")  # written in the scratch folder, left there
FIGURES = {
    "states": Figure(lambda _: ["check", "--states", "ci"], states_table),
    "exhaustive": Figure(lambda _: ["check", "--exhaustive", "2"], exhaustive_table),
    "policies": Figure(
        lambda _: ["drive", "--requests", "2000", "--prompt-len", "1024", *POLICY_PLOT],
        policies_table,
        lambda _: "The plot it draws (with matplotlib) is left in a temporary folder.",
    ),
    "check": Figure(
        lambda a: ["check", *([] if a.budget is None else ["--budget", f"{a.budget:g}"])],
        check_table,
        lambda a: (
            (
                "The README's first command, as a new user runs it"
                if a.budget is None
                else f"A budget of {a.budget:g} s per cache"
            )
            + " (the default: 30 s for each of radixkv's caches, 120 s for a MODULE:FACTORY; "
            "CI's `tox -e stateful` gives 10 s and fails on a situation left unreached; "
            "`--jobs` defaults to the machine's cores)."
        ),
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("figures", nargs="*", metavar="FIGURE", help=f"of {', '.join(FIGURES)}")
    parser.add_argument(
        "--budget", type=float, default=None, help="radixkv check --budget (default: its own)"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.figures) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; known: {', '.join(FIGURES)}")
    OUT.mkdir(parents=True, exist_ok=True)
    where, on = commit(), machine()
    for name in args.figures or list(FIGURES):
        figure = FIGURES[name]
        print(f"figures: radixkv {' '.join(figure.args(args))} ...", flush=True)
        done = run(figure.args(args))
        text = header(done, where, figure.note(args)) + f"On {on}.\n\n{figure.table(done.stdout)}\n"
        (OUT / f"{name}.md").write_text(text)
        print(f"figures: wrote {(OUT / f'{name}.md').relative_to(ROOT)} ({done.wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
