"""Running one rule of a Hypothesis state machine on an explicit state: the one module of
the kit that knows Hypothesis' internals (``setup_state``, rule objects, bundles, a silent
build context, the constants pool a search draws from). ``Driver`` forks a state (``fork``,
Hypothesis' own parts shared) or rebuilds it by replaying its path, lists the rules
applicable to it, and calls one with the draws ``picks`` select (``Draws`` plays
``st.data()`` and rule arguments).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

# Private names (no public route does their jobs: a test context outside a test, an empty
# pool of local constants): kit/pyproject.toml bounds Hypothesis to the range CI tests them
# on, both ends (tox -e hypothesis-range; tests/kit/test_hypothesis_range.py)
from hypothesis.control import BuildContext
from hypothesis.internal.conjecture import providers
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.internal.constants_ast import Constants
from hypothesis.stateful import Bundle, MultipleResults, RuleBasedStateMachine

from radixkv_conformance.explore.fork import fork
from radixkv_conformance.protocol import AdapterError

if TYPE_CHECKING:
    from radixkv_conformance.explore.alphabet import Alphabet

Seen = tuple[tuple[str, int], ...]
"""How many labels of each symmetry class the sequence has introduced so far."""
Fork = Literal["copy", "rerun"]


@dataclass(frozen=True)
class RuleCall:
    """One rule call: the rule and the value of every draw it made, in order."""

    rule: str
    choices: tuple[tuple[str, Any], ...]

    def text(self) -> str:
        shown = ", ".join(f"{label}={value!r}" for label, value in self.choices)
        return f"{self.rule}({shown})"


class AlphabetError(ValueError):
    """The alphabet cannot say what a draw may take: a configuration error, not a finding."""


class Draws:
    """Plays ``st.data()`` and rule arguments: the i-th draw takes option ``picks[i]``.

    Past the end of ``picks`` every draw takes its first option; ``widths`` records how
    many options each draw had, so the caller can enumerate the siblings.
    """

    def __init__(self, driver: Driver, state: State, rule: str, picks: tuple[int, ...]):
        self.driver, self.state, self.rule, self.picks = driver, state, rule, picks
        self.widths: list[int] = []
        self.choices: list[tuple[str, Any]] = []

    def draw(self, strategy: Any, label: Any = None) -> Any:
        name = str(label) if label is not None else f"draw {len(self.widths)}"
        domain = self.driver.alphabet.domain(self.rule, name)
        if domain is None:
            return self._pick(name, [(self.representative(strategy, name), self.state.seen)])
        try:
            options = domain.options(self.state.seen, self.state.machine, strategy)
        except AlphabetError:
            raise
        except Exception as error:  # the alphabet's own mistake must not pass for a finding
            message = f"{self.rule}: the domain of {name!r} failed on {strategy!r}: {error!r}"
            raise AlphabetError(message) from error
        return self._pick(name, options)

    def representative(self, strategy: Any, name: str) -> Any:
        self.driver.representatives.add(f"{self.rule}.{name}")
        return representative(strategy, self.rule, name)

    def made(self) -> tuple[int, ...]:
        """The picks this call made: the prefix it was given, then first options."""
        return tuple(self.picks[i] if i < len(self.picks) else 0 for i in range(len(self.widths)))

    def pick_handle(self, bundle: Bundle[Any]) -> Any:
        held = self.state.bundles.setdefault(bundle.name, [])
        at = self._pick(bundle.name, [(i, self.state.seen) for i in range(len(held))])
        return held.pop(at) if bundle.consume else held[at]

    def _pick(self, name: str, options: Sequence[tuple[Any, Seen]]) -> Any:
        if not options:
            raise AlphabetError(f"{self.rule}: draw {name!r} has no options")
        at = len(self.widths)
        pick = self.picks[at] if at < len(self.picks) else 0
        self.widths.append(len(options))
        value, self.state.seen = options[pick]
        self.choices.append((name, value))
        return value


def _unwrap(strategy: Any) -> tuple[str, Any]:
    inner = getattr(strategy, "wrapped_strategy", strategy)
    return type(inner).__name__, inner


def admits(strategy: Any, value: Any) -> bool:
    """Whether ``strategy`` could produce ``value`` (True where that is not knowable)."""
    kind, inner = _unwrap(strategy)
    if kind == "IntegersStrategy":
        low, high = inner.start, inner.end
        return (low is None or value >= low) and (high is None or value <= high)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return value in inner.elements
    return True


def finite_values(strategy: Any) -> Sequence[Any]:
    kind, inner = _unwrap(strategy)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return list(inner.elements)
    if kind == "BooleansStrategy":
        return [False, True]
    bounded = kind == "IntegersStrategy" and None not in (inner.start, inner.end)
    if bounded and inner.end - inner.start < 16:
        return list(range(inner.start, inner.end + 1))
    raise AlphabetError(f"no small finite set of values in {strategy!r}")


def representative(strategy: Any, rule: str, label: str) -> Any:
    """The simplest value of a strategy the alphabet does not name."""
    kind, inner = _unwrap(strategy)
    if kind in ("SampledFromStrategy", "JustStrategy") and not inner._transformations:
        return inner.elements[0]
    if kind == "IntegersStrategy":
        low, high = inner.start, inner.end
        return 0 if (low is None or low <= 0) and (high is None or high >= 0) else low
    if kind == "BooleansStrategy":
        return False
    if kind == "ListStrategy" and not inner.min_size:
        return []
    raise AlphabetError(f"{rule}: the alphabet needs a domain for draw {label!r} ({strategy!r})")


@dataclass(frozen=True)
class Call:
    step: RuleCall
    widths: tuple[int, ...]  # how many options each draw had
    error: Exception | None  # a finding; UnsatisfiedAssumption: a known finding


@dataclass
class State:
    machine: Any
    bundles: dict[str, list[Any]]
    seen: Seen
    path: tuple[tuple[str, tuple[int, ...]], ...]  # each step's rule and picks, for rerun
    variant: tuple[tuple[str, Any], ...] = ()  # what the initialize rules drew
    steps: list[RuleCall] = field(default_factory=list)  # the path as calls, for findings


SHARED = frozenset({"profile", "caps"})
"""Machine attributes no step changes (the run's profile, the adapter's capabilities): a
copy shares them instead of copying them."""
HISTORY = frozenset({"trace", "check"})
"""Machine attributes that only record what ran (the kit's trace, the current check's name):
they differ after every step and change no future, so the no-op test ignores them."""


class Driver:
    """Runs rules of one machine class on states: the only code that knows Hypothesis."""

    def __init__(self, machine_cls: type[RuleBasedStateMachine], alphabet: Alphabet) -> None:
        self.machine_cls = machine_cls
        self.alphabet = alphabet
        setup = machine_cls.setup_state()
        self.rules = sorted(setup.rules, key=lambda r: r.function.__name__)
        self.by_name = {r.function.__name__: r for r in self.rules}
        self.initializers = sorted(setup.initializers, key=lambda r: r.function.__name__)
        self.invariants = sorted(setup.invariants, key=lambda i: i.function.__name__)
        self.hypothesis_owned = _set_by_hypothesis(machine_cls)
        self.representatives: set[str] = set()  # draws the alphabet does not name

    # ---- states ------------------------------------------------------------------------

    def fresh(self) -> State:
        return State(self.machine_cls(), {}, (), ())

    def copy(self, state: State) -> State:
        """A deep copy of machine, adapter and handles (``fork``); Hypothesis' own parts and
        what no step changes are shared."""
        old = state.machine
        new = object.__new__(type(old))
        own = {k: v for k, v in vars(old).items() if k not in self.hypothesis_owned}
        memo: dict[int, Any] = {id(old): new}
        memo.update({id(v): v for k, v in vars(old).items() if k in self.hypothesis_owned})
        memo.update({id(v): v for k, v in vars(old).items() if k in SHARED})
        # a trace entry is written during its own step only: the copy's list shares them
        memo.update({id(step): step for step in vars(old).get("trace", ())})
        own, bundles = fork((own, state.bundles), memo)
        vars(new).update({k: v for k, v in vars(old).items() if k in self.hypothesis_owned})
        vars(new).update(own)
        return State(new, bundles, state.seen, state.path, state.variant)

    def rebuild(self, state: State) -> State:
        """The same state by replaying its path on a fresh machine."""
        new = self.fresh()
        for rule, picks in state.path:
            self.call(new, rule, picks)
        new.variant = state.variant
        return new

    # ---- calls ---------------------------------------------------------------------------

    def applicable(self, state: State, initial: bool) -> list[str]:
        rules = self.initializers if initial else self.rules
        return [
            r.function.__name__
            for r in rules
            if r.function.__name__ not in self.alphabet.left_out
            and all(pre(state.machine) for pre in r.preconditions)
            and all(state.bundles.get(b.name) for b in r.bundles)
        ]

    def call(self, state: State, name: str, picks: tuple[int, ...]) -> Call:
        """Run rule ``name`` with ``picks`` on ``state``; a failed check is returned."""
        rule = self.by_name.get(name) or next(
            r for r in self.initializers if r.function.__name__ == name
        )
        draws = Draws(self, state, name, picks)
        error: Exception | None = None
        kwargs: dict[str, Any] = {}
        try:
            for arg, strategy in sorted(rule.arguments.items()):
                if isinstance(strategy, Bundle):
                    kwargs[arg] = draws.pick_handle(strategy)
                elif type(strategy).__name__ == "DataStrategy":
                    kwargs[arg] = draws
                else:
                    kwargs[arg] = draws.draw(strategy, arg)
            result = rule.function(state.machine, **kwargs)
            added = list(result.values) if isinstance(result, MultipleResults) else [result]
            for target in rule.targets:  # multiple() with no values adds nothing
                state.bundles.setdefault(getattr(target, "name", target), []).extend(added)
        except (AlphabetError, AdapterError):  # the kit's alphabet, an adapter's misuse
            raise
        except Exception as failed:  # a finding, or an acknowledged one (UnsatisfiedAssumption)
            error = failed
        state.path = (*state.path, (name, draws.made()))
        return Call(RuleCall(name, tuple(draws.choices)), tuple(draws.widths), error)

    def check(self, state: State) -> None:
        for inv in self.invariants:
            if all(pre(state.machine) for pre in inv.preconditions):
                inv.function(state.machine)

    def snapshot(self, state: State) -> Any:
        sut = getattr(state.machine, "sut", None)
        take = getattr(sut, "snapshot", None)
        return take() if callable(take) else None

    def same_machine(self, before: State, after: State) -> bool:
        """The machine's own state (model, ledger, reset epoch ...) is unchanged: a reset of
        an empty cache changes no snapshot, yet every earlier handle is stale after it."""
        old, new = vars(before.machine), vars(after.machine)
        mine = [k for k in old if k not in self.hypothesis_owned | HISTORY | {"sut"}]
        return old.keys() == new.keys() and all(_same(old[k], new[k], set()) for k in mine)

    def changes_handles(self, name: str) -> bool:
        rule = self.by_name[name]
        return bool(rule.targets) or any(b.consume for b in rule.bundles)


def _set_by_hypothesis(machine_cls: type[RuleBasedStateMachine]) -> frozenset[str]:
    """The attributes ``RuleBasedStateMachine.__init__`` itself sets (rules, bundles,
    printers): copies share them. Whatever the machine's own ``__init__`` adds is copied."""
    bare = object.__new__(machine_cls)
    RuleBasedStateMachine.__init__(bare)
    return frozenset(vars(bare))


_OWN_METHODS: dict[type, frozenset[str]] = {}


def _own_methods(cls: type) -> frozenset[str]:
    """Names defined by ``cls`` or a base other than ``object`` (cached per class)."""
    if cls not in _OWN_METHODS:
        bases = [base for base in cls.__mro__ if base is not object]
        _OWN_METHODS[cls] = frozenset(name for base in bases for name in vars(base))
    return _OWN_METHODS[cls]


def _same(a: Any, b: Any, visited: set[tuple[int, int]]) -> bool:
    """Structural equality of two copies (objects without ``__eq__`` compared field by
    field); anything it cannot compare counts as different, which only prunes less."""
    if a is b or (id(a), id(b)) in visited:
        return True
    if type(a) is not type(b):
        return False
    visited.add((id(a), id(b)))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], visited) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y, visited) for x, y in zip(a, b, strict=True))
    try:
        if "__eq__" in _own_methods(type(a)):
            return bool(a == b)
        return hasattr(a, "__dict__") and _same(vars(a), vars(b), visited)
    except Exception:  # e.g. a tensor's ambiguous truth value: not provably the same
        return False


def quiet_build_context() -> BuildContext:
    """Rules may call ``hypothesis.note``, which needs a test context: a silent one."""
    data = ConjectureData.for_choices(())
    return BuildContext(data, wrapped_test=lambda: None)


@contextmanager
def draws_independent_of_loaded_modules() -> Iterator[None]:
    """Within this block a seeded search draws the same everywhere.

    Hypothesis mixes into its draws the literals of every "local" module loaded so far (not
    in site-packages, not a test file): which modules those are depends on how the kit was
    installed (editable or a wheel), on the caller's own modules and on what earlier tests
    imported, so the same seed found a bug on one machine and missed it on another. The
    kit's strategies say what to draw; no module's literals are a better guess for a cache.
    """
    loaded = providers._get_local_constants
    providers._get_local_constants = Constants  # an empty pool, whatever is loaded
    providers.CONSTANTS_CACHE.cache.clear()  # pools cached with the loaded modules' literals
    try:
        yield
    finally:
        providers._get_local_constants = loaded
        providers.CONSTANTS_CACHE.cache.clear()
