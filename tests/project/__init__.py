"""The project as shipped: packaging, the quiet import, the README's examples, the
documentation site's sources."""
