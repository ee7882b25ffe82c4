"""Keys and hashes: RadixKey, the key forms, the compiled key helpers against the pure-Python
reference, page hashes."""
