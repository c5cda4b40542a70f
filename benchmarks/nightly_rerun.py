"""A second nightly run with nothing changed, next to the first run on the same spec.

The first run (fresh store) resolves, finds or builds the example image, verifies it and
records everything; the second finds nothing to do. Target: the second in seconds.
Run: .venv/bin/python benchmarks/nightly_rerun.py [SPEC] [--store URL | --postgres]
(needs a container engine). ``--store URL``: an empty history database to use (e.g. a
PostgreSQL one); ``--postgres``: start a throwaway PostgreSQL server (tests/pgserver.py,
Debian's server binaries) and use a fresh database on it. Default: a temporary SQLite file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nightly(spec: str, store: str | Path, reports: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "envkit.cli", "nightly", spec, "--locked", "--no-gpus",
                           "--store", str(store), "--reports", str(reports), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 10):
        sys.exit(f"nightly failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed, json.loads(proc.stdout)


def main() -> None:
    import argparse
    from contextlib import ExitStack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="examples/team.yaml")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--store", help="an empty history database URL")
    where.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        store: str | Path = args.store or Path(tmp) / "history.sqlite"
        if args.postgres:
            sys.path.insert(0, str(ROOT))
            from tests import pgserver

            server = pgserver.Server(pgserver.server_bin()).start()
            stack.callback(server.stop)
            _, store = pgserver.create_database(server.admin_url)
        reports = Path(tmp) / "reports"
        first, doc1 = nightly(args.spec, store, reports)
        second, doc2 = nightly(args.spec, store, reports)
    print(f"store: {'postgresql' if '://' in str(store) and not str(store).startswith('sqlite') else 'sqlite'}")
    print(f"{'run':<10}{'seconds':>10}  outcome")
    print(f"{'first':<10}{first:>10.2f}  {doc1['outcome']} ({', '.join(i['build'] for i in doc1['images'])})")
    print(f"{'second':<10}{second:>10.2f}  {doc2['outcome']}")
    print(f"second / first: {second / first:.3f}")


if __name__ == "__main__":
    main()
