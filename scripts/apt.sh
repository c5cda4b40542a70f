# Sourced by the ensure-*.sh scripts: what each needs to find a program and install Debian packages.
# The caller defines log() first.

# have PROGRAM: on PATH, or in /usr/sbin (not on a non-root PATH).
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

# apt_install WHAT PACKAGE...: install the packages from Debian's archive (as root on a Debian-family host; the
# package lists are refreshed only when the install without it fails), or say what to install and return 1.
apt_install() {
  local what=$1
  shift
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1 || [ ! -r /etc/debian_version ]; then
    log "missing $what: install Debian's $* (apt-get install $*) or your system's equivalent, then rerun"
    return 1
  fi
  log "installing $* from Debian's archive"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  }
}
