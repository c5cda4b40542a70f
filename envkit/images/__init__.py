"""Build each locked image: bases, the builders, and offline bundles."""
