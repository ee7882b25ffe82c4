"""The rule sets: one per capability, each a ``ConformanceMachine`` (``machines.py``, the
core every rule set shares) with the rules and invariants of its part, against its spec
model (``radixkv_spec.CacheModel``).

- ``plain``: a prefix cache of full attention (``radixkv_spec.model``), with the cache that
  owns allocation (``allocation="cache"``) and the eviction policies.
- ``swa``: a sliding window (``radixkv_spec.swa``): tombstones, SWA eviction, lock windows.
- ``mamba``: Mamba state slots (``radixkv_spec.mamba``): copy-on-write, state eviction.
- ``events``: the router's view, rebuilt from the event stream after every step (an oracle
  every rule set runs when the cache declares ``events``).

``registry.rule_set`` picks one from the capabilities an adapter declares.
"""
