"""Keeping the flow running on a host: gc (old images, containers, scratch, build cache) and doctor."""
