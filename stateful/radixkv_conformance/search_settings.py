"""How long the machines search: Hypothesis settings profiles, chosen with
``HYPOTHESIS_PROFILE`` (not the engine ``Profile`` of ``radixkv_conformance.profile``).

``ci`` fits a 2-core CI run and is derandomized, so a red CI run reproduces exactly;
``thorough`` is the long run users start by hand (``tox -e thorough``). No profile keeps an
example database: the kit writes nothing into the user's folder but the traces asked for
(``--traces``), and a trace is what replays a finding.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=SLOW_OK,
)
settings.register_profile(
    # The ci run without shrinking: a mutation run needs to know *that* a mutant fails.
    "mutation",
    settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    print_blob=False,
)
settings.register_profile(
    "dev",
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=SLOW_OK,
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    database=None,
    suppress_health_check=SLOW_OK,
)


def load_profile() -> str:
    """Load the profile named by HYPOTHESIS_PROFILE (``ci`` under CI, else ``dev``)."""
    name = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    return name
