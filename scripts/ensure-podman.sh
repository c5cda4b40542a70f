#!/usr/bin/env bash
# Make sure Debian's podman is installed, so the test that builds the same lock on Podman (another engine, and
# buildah as the builder: tests/integration/test_reproducible.py) runs. The test starts a Podman of its own
# (own storage, own socket); nothing here configures or starts the machine's. Idempotent.
set -euo pipefail

log() { printf 'ensure-podman: %s\n' "$*" >&2; }
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

if ! { have podman && [ -d /usr/lib/cni ]; }; then
  apt_install "podman" podman containernetworking-plugins
fi
log "installed (podman $(dpkg-query -W -f '${Version}' podman 2>/dev/null || echo "?"))"
