"""The explorers: the kit's state machines run over every short sequence or every reachable
state of small bounds, instead of a random sample.

- ``alphabet``: the finite values each draw may take, with the symmetry pruning of labels.
- ``driver``: one rule of a machine run on an explicit state (the only module that knows
  Hypothesis' internals); forking a state by deep copy, or rebuilding it by replay.
- ``sequences``: every sequence up to N steps, depth first (``radixkv check --exhaustive N``).
- ``states``: every reachable state within ``Bounds``, breadth first over canonical states,
  to a fixpoint, a depth cap or a time budget (``radixkv check --states BOUNDS``, and the
  tree exploration ``radixkv check`` runs before its search).
"""
