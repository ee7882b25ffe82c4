"""How many calls one plain insert step of the conformance kit makes, and where they go.

    python benchmarks/kit_calls.py [--invariants] [--functions]

Drives the kit's steps on radixkv's RadixCache as a trace replay does (no Hypothesis):
ten fresh runs, each of five inserts of distinct two-page keys, and counts, with
``sys.setprofile``, the calls of the third to fifth insert of each run (a small tree, as the
review measured it): the step, its checks and the coverage probe around it, and with
``--invariants`` the invariants that run after it too. Calls are counted by where the
called function lives: the kit, the spec, the cache (``src/radixkv``), the standard library,
and C builtins. The replay's own decoding of a step (``trace.py``, ``replay.py``) is
counted apart: a search does not make it.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from types import FrameType
from typing import Any

from radixkv_conformance.registry import machine_for
from radixkv_conformance.replay import _run_step
from radixkv_conformance.session import LockRef, NodeRef
from radixkv_conformance.targets import OWN, load
from radixkv_conformance.trace import decode

RUNS, INSERTS, FIRST_COUNTED = 10, 5, 2
REPLAY = ("radixkv_conformance/trace.py", "radixkv_conformance/replay.py")


def where(filename: str) -> str:
    if filename.endswith(REPLAY):
        return "replay"
    for part, name in (("/stateful/", "kit"), ("/spec/", "spec"), ("/src/radixkv", "cache")):
        if part in filename:
            return name
    return "torch" if "torch" in filename else "stdlib"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invariants", action="store_true", help="count the invariants too")
    parser.add_argument("--functions", action="store_true", help="the kit's and spec's busiest")
    args = parser.parse_args()
    factory, profile = load(dict(OWN)["RadixCache"])
    machine_class = machine_for("KitCalls", factory, profile, known=frozenset())
    places: Counter[str] = Counter()
    functions: Counter[str] = Counter()

    def count(frame: FrameType, event: str, _: Any) -> None:
        if event == "c_call":
            places["builtin"] += 1
        elif event == "call":
            place = where(frame.f_code.co_filename)
            places[place] += 1
            if place in ("kit", "spec"):
                name = frame.f_code.co_filename.rsplit("/", 1)[-1]
                functions[f"{name}:{frame.f_code.co_name}"] += 1

    counted = 0
    for run in range(RUNS):
        machine = machine_class()
        machine.setup(1, None)
        nodes: dict[int, NodeRef] = {}
        locks: dict[int, LockRef] = {}
        for i in range(INSERTS):
            step = {"id": i, "op": "insert", "tokens": [i, run], "namespace": None}
            step["indices"] = [2 * i, 2 * i + 1]
            measured = i >= FIRST_COUNTED
            counted += measured
            sys.setprofile(count if measured else None)
            _run_step(machine, decode(step), nodes, locks)
            machine.probe.close(machine.model)  # the step is over, as the next one would say
            sys.setprofile(count if measured and args.invariants else None)
            machine.check_invariants_now()
            sys.setprofile(None)
    python = sum(n for place, n in places.items() if place not in ("builtin", "replay"))
    own = places["kit"] + places["spec"] + places["cache"]
    print(
        f"calls per insert step{' with its invariants' if args.invariants else ''}: "
        f"{python / counted:.0f} Python calls, {own / counted:.0f} of them radixkv's own "
        f"(kit, spec, cache), {places['builtin'] / counted:.0f} C builtins; "
        f"the replay's decoding {places['replay'] / counted:.0f} more"
    )
    print({place: round(n / counted) for place, n in places.most_common()})
    if args.functions:
        for name, n in functions.most_common(20):
            print(f"  {n / counted:5.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
