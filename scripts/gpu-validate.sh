#!/usr/bin/env bash
# Run the certification payload natively on a GPU machine (the lent device has CUDA torch
# but no Docker and no network) and keep what it printed. Usage on the device, from any
# directory: OUT=/some/dir bash scripts/gpu-validate.sh   (OUT defaults to /tmp/envkit-gpu)
# Writes under $OUT: gpu-validation.json (the payload document), gpu-validation.txt (machine,
# wall time, one line per check, acceptance verdicts), gpu-validation.stderr, expect.json; where jax
# is installed also the JAX run's expect-jax.json, gpu-validation-jax.json and gpu-validation-jax.stderr.
# Bounded: each payload's own watchdog fires at 150 s and `timeout` kills it at 200 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/envkit-gpu}
mkdir -p "$OUT"
txt="$OUT/gpu-validation.txt"
{ date -u +%FT%TZ; python3 -V; timeout 30 nvidia-smi; df -h /dev/shm; } > "$txt" 2>&1

# The expect file a lock would give, from what is installed (scripts/gpu_expect.py says how).
timeout 60 python3 scripts/gpu_expect.py > "$OUT/expect.json" 2>> "$txt" || echo '{}' > "$OUT/expect.json"

start=$(date +%s)
timeout -k 10 200 python3 envkit/payload/envkit_check --mode certify --expect "$OUT/expect.json" \
  --json --timeout 150 > "$OUT/gpu-validation.json" 2> "$OUT/gpu-validation.stderr"
echo "payload exit=$? wall_s=$(( $(date +%s) - start ))" >> "$txt"

python3 scripts/gpu_summary.py "$OUT/gpu-validation.json" torch >> "$txt" 2>&1

# The JAX path too, where jax is installed (the lent machine has jax with its CUDA 13 plugin):
# its own expect file (a jax[cuda13] lock's shape) and document, its lines appended to the same .txt.
if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("jax") is None)' 2>/dev/null; then
  timeout 60 python3 scripts/gpu_expect.py --framework jax > "$OUT/expect-jax.json" 2>> "$txt" || echo '{}' > "$OUT/expect-jax.json"
  start=$(date +%s)
  timeout -k 10 200 python3 envkit/payload/envkit_check --framework jax --mode certify \
    --expect "$OUT/expect-jax.json" --json --timeout 150 > "$OUT/gpu-validation-jax.json" 2> "$OUT/gpu-validation-jax.stderr"
  echo "jax payload exit=$? wall_s=$(( $(date +%s) - start ))" >> "$txt"
  python3 scripts/gpu_summary.py "$OUT/gpu-validation-jax.json" jax >> "$txt" 2>&1
fi
cat "$txt"
