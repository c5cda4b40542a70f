#!/usr/bin/env bash
# Make sure the tools `envkit export sif` assembles a SIF with are installed (Debian's skopeo, umoci,
# squashfs-tools and siftool), so its integration test runs. Apptainer itself, which runs a SIF, has no
# Debian package (bookworm) and is not installed: nothing here runs a SIF. Idempotent.
set -euo pipefail

log() { printf 'ensure-sif-tools: %s\n' "$*" >&2; }
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

if ! { have skopeo && have umoci && have mksquashfs && have unsquashfs && have siftool; }; then
  apt_install "the SIF tools" skopeo umoci squashfs-tools siftool
fi
log "installed (skopeo $(dpkg-query -W -f '${Version}' skopeo 2>/dev/null || echo "?"), siftool $(dpkg-query -W -f '${Version}' siftool 2>/dev/null || echo "?"))"
