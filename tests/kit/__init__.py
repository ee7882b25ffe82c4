"""The conformance kit as a user meets it: run_conformance, the CLI, coverage, findings,
minimization, planted caches, profiles."""
