#!/usr/bin/env bash
# Run the certification payload natively on a GPU machine (the lent device has CUDA torch
# but no Docker) and keep what it printed. Usage on the device: bash scripts/gpu-validate.sh
# Writes $OUT/gpu-validation.json (the payload document) and $OUT/gpu-validation.txt.
set -uo pipefail
OUT=${OUT:-/tmp/envkit-gpu}
mkdir -p "$OUT"
python3 - <<'PY' > "$OUT/expect.json"
import json, torch
print(json.dumps({"torch": torch.__version__.split("+")[0], "cuda": torch.version.cuda,
                  "arch_list": [a for a in torch.cuda.get_arch_list()],
                  "perf_floors": {"bf16_matmul_tflops": 0}}))
PY
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -V; } > "$OUT/gpu-validation.txt" 2>&1
start=$(date +%s)
python3 envkit/certify/payload/envkit_check.py --mode certify --expect "$OUT/expect.json" --json --timeout 300 \
  > "$OUT/gpu-validation.json" 2>> "$OUT/gpu-validation.txt"
echo "exit=$? seconds=$(( $(date +%s) - start ))" >> "$OUT/gpu-validation.txt"
