# nvcc.sh ARCH [link]: nvcc's release, k.cu compiled for sm_ARCH; with "link", main.cu linked into an executable that runs
set -euo pipefail
nvcc --version
nvcc -c -arch="sm_$1" /src/k.cu -o /tmp/k.o && test -s /tmp/k.o && echo COMPILED
if [ "${2:-}" = link ]; then
  nvcc -arch="sm_$1" /src/main.cu -o /tmp/main && /tmp/main && echo LINKED
fi
