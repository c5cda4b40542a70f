"""The names the trust commands read, owned here with no crypto import, so that the CLI's options can name them in
their help without loading ``cryptography``: the key files ``envkit keys generate`` writes and the environment
variables that stand in for ``--signing-key``, ``--trusted-keys`` and the private key's password
(``trust.keys`` reads them)."""

from __future__ import annotations

PRIVATE_FILE = "envkit.key"
PUBLIC_FILE = "envkit.pub"
SIGNING_KEY_ENV = "ENVKIT_SIGNING_KEY"
TRUSTED_KEYS_ENV = "ENVKIT_TRUSTED_KEYS"
PASSWORD_ENV = "ENVKIT_KEY_PASSWORD"
