"""Deliberate single bugs that the harness must catch (``python -m mutation``)."""
