"""The package index: its URLs and logins, the PEP 691 client, the facts read from wheels (the CUDA libraries a
framework pins, its compiled arch list) and uv's closure compile. Knows nothing of the catalog or the spec."""
