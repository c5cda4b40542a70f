#!/usr/bin/env bash
# Make sure Slurm's daemons and clients and munge are installed (Debian's slurm-wlm and munge), so the fleet
# tests can start a private single-host cluster (tests/integration/slurm_cluster.py). Starts no service:
# each test session starts its own munged, slurmctld and slurmd processes on its own ports. Idempotent.
set -euo pipefail

log() { printf 'ensure-slurm: %s\n' "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

if have slurmctld && have slurmd && have sbatch && have munged; then
  log "slurm is installed (slurm-wlm $(dpkg-query -W -f '${Version}' slurm-wlm 2>/dev/null || echo "version unknown"))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "missing slurm-wlm/munge: install Debian's slurm-wlm, slurmctld, slurmd, slurm-client and munge, then rerun"
  exit 1
fi
log "installing slurm-wlm, slurmctld, slurmd, slurm-client and munge from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge >/dev/null 2>&1 || {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge >/dev/null
}
log "installed (slurm-wlm $(dpkg-query -W -f '${Version}' slurm-wlm))"
