"""The use cases the CLI calls: one typed function per command, joining the stages (no printing, no exits)."""
