"""The team registry: its HTTP API, credentials and TLS, publishing, reading what it holds, and retention."""
