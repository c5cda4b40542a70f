"""A keyring backend for tests: the logins a JSON file holds (``$ENVKIT_TEST_KEYRING``: {service: [user,
password]}), looked up as a plugin such as artifacts-keyring is (by service alone). Chosen with
``PYTHON_KEYRING_BACKEND=tests.keyringfake.FileKeyring``, in this process or an envkit subprocess.
A service named ``"broken"`` raises, as a locked or unreachable backend does."""

from __future__ import annotations

import json
import os

from keyring.backend import KeyringBackend
from keyring.credentials import SimpleCredential
from keyring.errors import KeyringLocked

ENV = "ENVKIT_TEST_KEYRING"


class FileKeyring(KeyringBackend):
    priority = 1

    def _logins(self) -> dict:
        path = os.environ.get(ENV)
        return json.loads(open(path).read()) if path and os.path.exists(path) else {}

    def get_credential(self, service, username):
        logins = self._logins()
        if "broken" in logins:
            raise KeyringLocked("the keyring is locked")
        if service in logins:
            return SimpleCredential(*logins[service])
        return None

    def get_password(self, service, username):
        found = self.get_credential(service, username)
        return found.password if found is not None and found.username == username else None

    def set_password(self, service, username, password):
        raise NotImplementedError

    def delete_password(self, service, username):
        raise NotImplementedError
