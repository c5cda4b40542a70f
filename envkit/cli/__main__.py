"""``python -m envkit.cli``: the same as the ``envkit`` command."""

from envkit.cli import main

main()
