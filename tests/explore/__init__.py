"""The explorers: every operation sequence (--exhaustive) and every state within bounds
(--states, the default check's tree exploration)."""
