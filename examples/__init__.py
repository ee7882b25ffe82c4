"""Examples a user copies: dict_cache.py, a torch-free cache and its adapter for the kit."""
