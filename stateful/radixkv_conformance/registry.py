"""A machine class for one implementation: the rule set of its mode (plain, SWA, Mamba),
checked against what the adapter claims and the profile it runs under. Above the rule
sets, so no rule set imports the module that picks it."""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

from radixkv_spec.cross import decisive
from radixkv_spec.policies import DEFAULT_REFRESH
from radixkv_spec.situations import declared

from radixkv_conformance.ledger import KitHost, idle_host
from radixkv_conformance.machines import ConformanceMachine
from radixkv_conformance.profile import RADIXKV, Profile
from radixkv_conformance.protocol import (
    AdapterBroken,
    AdapterError,
    AdapterFactory,
    require_capabilities,
)
from radixkv_conformance.rules.events import EventsRules
from radixkv_conformance.rules.mamba import MambaRules
from radixkv_conformance.rules.plain import PlainRules
from radixkv_conformance.rules.receipts import ReceiptRules
from radixkv_conformance.rules.swa import SwaRules
from radixkv_conformance.session import Session

RULE_SETS: dict[str, type[ConformanceMachine]] = {
    "plain": PlainRules,
    "swa": SwaRules,
    "mamba": MambaRules,
}


def rule_set(capabilities: frozenset[str]) -> type[ConformanceMachine]:
    """The rule set of an adapter's mode: the one its capabilities name (``swa``,
    ``mamba``), else plain.

    Raises ``AdapterError`` when the adapter claims a capability that mode has no rule for
    (two parts, say): a claim the kit would list as checked but never exercise is refused,
    never passed.
    """
    mode = next((name for name in RULE_SETS if name in capabilities), "plain")
    rules = RULE_SETS[mode]
    unchecked = capabilities - rules.checks
    if unchecked:
        raise AdapterError(
            f"the {rules.mode} rule set has no rules for {sorted(unchecked)}, so the kit "
            "cannot check them: drop the claim (or check that mode's capabilities in its "
            "own adapter)"
        )
    return rules


def probe_adapter(factory: AdapterFactory, profile: Profile) -> Any:
    """One adapter built before any run, to read what it claims (``capabilities``, ``notes``).

    A factory that refuses its options (``ValueError``, ``LookupError``: a bad
    ``--option``) raises that; one that cannot be called as ``factory(page_size, host)``
    with them, or fails otherwise, is ``AdapterBroken``."""
    probe = idle_host(profile.page_sizes[0], profile.windows[0])
    try:
        return factory(probe.page_size, probe)
    except (ValueError, LookupError):
        raise
    except Exception as error:
        if isinstance(error, TypeError) and _options_do_not_bind(factory, probe):
            raise LookupError(f"the factory takes no such --option: {error}") from error
        name = getattr(factory, "__qualname__", None) or repr(factory)
        raise AdapterBroken(
            f"{name}(page_size, host) did not build an adapter: {type(error).__name__}: {error}"
        ) from error


def _options_do_not_bind(factory: AdapterFactory, probe: KitHost) -> bool:
    """The factory's own signature takes ``(page_size, host)`` but not the options bound to
    it (a ``functools.partial`` of ``--option``s): the command line's mistake."""
    if not isinstance(factory, functools.partial) or not factory.keywords:
        return False
    try:
        signature = inspect.signature(factory.func)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind(probe.page_size, probe)
    except TypeError:
        return False
    try:
        signature.bind(probe.page_size, probe, **factory.keywords)
    except TypeError:
        return True
    return False


def probe_capabilities(factory: AdapterFactory, profile: Profile) -> frozenset[str]:
    """Check what the factory's adapters claim, before any run (``AdapterError``)."""
    return require_capabilities(probe_adapter(factory, profile))


def machine_for(
    name: str,
    factory: AdapterFactory,
    profile: Profile = RADIXKV,
    *,
    capabilities: frozenset[str] | None = None,
    known: frozenset[str] = frozenset(),
    progress: Callable[[Counter[str]], None] | None = None,
) -> type[ConformanceMachine]:
    """A machine class for one implementation: the rule set of every capability it declares.

    ``capabilities`` defaults to what an adapter the factory builds claims (checked up
    front). Distinct names keep Hypothesis' example databases apart.
    """
    claims = probe_capabilities(factory, profile) if capabilities is None else capabilities
    rules = _rules_for(claims, profile)
    receipts = _checks_receipts(claims, profile)
    watched = tuple(declared(claims, profile.stores, profile.allocation))
    lru = profile.victims.name.startswith("lru")  # recency decides a victim
    session = Session(
        factory,
        profile,
        claims,
        known,
        progress=progress,
        name=name,
        situations=watched,
        decisive=decisive(lru) if profile.stores else (),
    )
    # the rule sets of capabilities beside the mode's, then the mode's own
    beside = (
        *((ReceiptRules,) if receipts else ()),
        *((EventsRules,) if "events" in claims else ()),
    )
    invariants = rules.invariant_names + tuple(n for extra in beside for n in extra.own_invariants)
    return type(name, (*beside, rules), {"session": session, "invariant_names": invariants})


def _rules_for(claims: frozenset[str], profile: Profile) -> type[ConformanceMachine]:
    """The rule set of the mode ``claims`` name; ``AdapterError`` for capabilities that do
    not go together, or with the profile, or that the mode's rule set cannot judge: before
    any machine is built."""
    if "node_boundaries" in claims and "swa" not in claims:
        raise AdapterError(  # only an SWA lock's extent depends on where the nodes begin
            "capability 'node_boundaries' places each SWA lock's window on the cache's nodes: "
            "it needs capability 'swa'"
        )
    rules = rule_set(claims)
    if rules.mode != "plain" and profile.refresh_on != DEFAULT_REFRESH:
        raise AdapterError(  # its model knows no other refresh: it would judge by its own
            f"the {rules.mode} rule set's model refreshes recency on every match and insert "
            f"only; profile {profile.name!r} does not (refresh_on={sorted(profile.refresh_on)})"
        )
    if rules.mode != "plain" and profile.allocation == "cache":
        raise AdapterError(f"the {rules.mode} rule set has no rules for allocation='cache'")
    if "capacity" in claims and profile.allocation != "cache":
        raise AdapterError(
            "capability 'capacity' is a pool the cache allocates from: profile "
            f"{profile.name!r} has the caller allocate (allocation={profile.allocation!r})"
        )
    if "relock" in claims and not _checks_receipts(claims, profile):
        raise AdapterError(
            "capability 'relock' is a per-sequence lock taken again: it needs "
            f"lock_model='sets' and 'unlock_checks' (profile {profile.name!r} has "
            f"lock_model={profile.lock_model!r})"
        )
    if "router_events" in claims and "events" not in claims:
        raise AdapterError(
            "capability 'router_events' is the events stream after a filter: it needs 'events'"
        )
    return rules


def _checks_receipts(claims: frozenset[str], profile: Profile) -> bool:
    """Whether the kit judges lock receipts: per-sequence locks whose unlock is checked."""
    return "unlock_checks" in claims and profile.lock_model == "sets"
