"""The caches themselves: RadixCache (pages, locks, eviction, reset, SWA), MambaRadixCache,
ChunkCache, RadixTrie, the pools and the policies."""
