"""KV events: records, the wire, ZeroMQ, what a router is sent, and the kit's events rule set."""
