#!/usr/bin/env bash
# Make sure a container engine answers, installing and starting Debian's docker.io when
# this is a Debian-family host where we are root and none runs. Also installs the other
# host tools envkit's full pipeline uses (debootstrap for bases, docker-registry for the
# registry tests, postgresql for the shared history store tests). Idempotent; prints what it did.
set -euo pipefail

log() { printf 'ensure-engine: %s\n' "$*" >&2; }

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need_pkgs+=(debootstrap)
command -v docker-registry >/dev/null 2>&1 || need_pkgs+=(docker-registry)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_pkgs+=(postgresql)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing: ${need_pkgs[*]}. Install Docker Engine (https://docs.docker.com/engine/install/), debootstrap and (for the registry and store tests) docker-registry and postgresql, then rerun."
    engine_up && exit 0 || exit 1
  fi
  log "installing ${need_pkgs[*]} from Debian's archive"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" iptables >/dev/null
fi

if engine_up; then
  log "engine is up ($(docker version --format '{{.Server.Version}}'))"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  log "no engine answers and we are not root: start Docker (or set DOCKER_HOST), then rerun"
  exit 1
fi

dockerd_bin=$(command -v dockerd || echo /usr/sbin/dockerd)
log "starting $dockerd_bin in the background (log: /var/log/envkit-dockerd.log)"
nohup "$dockerd_bin" >/var/log/envkit-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  engine_up && { log "engine is up"; exit 0; }
  sleep 1
done
log "dockerd did not come up; its log ends with:"
tail -n 20 /var/log/envkit-dockerd.log >&2
exit 1
