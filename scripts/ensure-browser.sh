#!/usr/bin/env bash
# Make sure a headless-capable Chromium is installed for the HTML-report browser test:
# installs Debian's `chromium` package with apt-get when it is missing and we are root on a
# Debian-family host; otherwise exits non-zero saying what to install. Idempotent.
set -euo pipefail

log() { printf 'ensure-browser: %s\n' "$*" >&2; }

find_browser() {
  for b in "${CHROMIUM:-}" /usr/bin/chromium "$(command -v chromium 2>/dev/null || true)"; do
    if [ -n "$b" ] && [ -x "$b" ]; then
      printf '%s\n' "$b"
      return 0
    fi
  done
  return 1
}

if browser=$(find_browser); then
  log "chromium is installed: $browser ($("$browser" --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  log "chromium is missing and we are not root: install it (Debian: 'sudo apt-get install chromium'), or set CHROMIUM=/path/to/chromium"
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1 || [ ! -r /etc/debian_version ]; then
  log "chromium is missing and this is not a Debian-family host: install Chromium with your package manager, or set CHROMIUM=/path/to/chromium"
  exit 1
fi

log "installing chromium from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# fonts-dejavu-core: so the screenshot has glyphs to draw.
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

if browser=$(find_browser); then
  log "chromium installed: $browser ($("$browser" --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi
log "apt-get finished but no chromium executable was found"
exit 1
