"""The history store: runs, steps, builds, certificates, metrics, pushes, mirrors (SQLite or PostgreSQL)."""
