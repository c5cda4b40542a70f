#!/usr/bin/env bash
# Make sure the tools `envkit export sif` assembles a SIF with are installed (Debian's skopeo, umoci,
# squashfs-tools and siftool), so its integration test runs. Apptainer itself, which runs a SIF, has no
# Debian package (bookworm) and is not installed: nothing here runs a SIF. Idempotent.
set -euo pipefail

log() { printf 'ensure-sif-tools: %s\n' "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

PACKAGES="skopeo umoci squashfs-tools siftool"
if have skopeo && have umoci && have mksquashfs && have unsquashfs && have siftool; then
  log "installed (skopeo $(dpkg-query -W -f '${Version}' skopeo 2>/dev/null || echo "?"), siftool $(dpkg-query -W -f '${Version}' siftool 2>/dev/null || echo "?"))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "missing: install Debian's $PACKAGES (apt-get install $PACKAGES), then rerun"
  exit 1
fi
log "installing $PACKAGES from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null 2>&1 || {
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
}
log "installed (skopeo $(dpkg-query -W -f '${Version}' skopeo), siftool $(dpkg-query -W -f '${Version}' siftool))"
