#!/usr/bin/env bash
# Make sure Slurm's daemons and clients and munge are installed (Debian's slurm-wlm and munge), so the fleet
# tests can start a private single-host cluster (tests/slurmcluster.py). Starts no service: each test session
# starts its own munged, slurmctld and slurmd processes on its own ports. Idempotent.
set -euo pipefail

log() { printf 'ensure-slurm: %s\n' "$*" >&2; }
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"

if ! { have slurmctld && have slurmd && have sbatch && have munged; }; then
  apt_install "Slurm and munge" slurm-wlm slurmctld slurmd slurm-client munge
fi
log "slurm is installed (slurm-wlm $(dpkg-query -W -f '${Version}' slurm-wlm 2>/dev/null || echo "version unknown"))"
