"""Other engines: their vectors (tests/vectors/), their findings replayed, their adapters'
loaders."""
