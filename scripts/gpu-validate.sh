#!/usr/bin/env bash
# Run the certification payload natively on a GPU machine (the lent device has CUDA torch
# but no Docker and no network) and keep what it printed. Usage on the device, from any
# directory: OUT=/some/dir bash scripts/gpu-validate.sh   (OUT defaults to /tmp/envkit-gpu)
# Writes under $OUT: gpu-validation.json (the payload document), gpu-validation.txt (machine,
# wall time, one line per check, acceptance verdicts), gpu-validation.stderr, expect.json.
# Bounded: the payload's own watchdog fires at 150 s and `timeout` kills it at 200 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/envkit-gpu}
mkdir -p "$OUT"
txt="$OUT/gpu-validation.txt"
{ date -u +%FT%TZ; python3 -V; timeout 30 nvidia-smi; df -h /dev/shm; } > "$txt" 2>&1

# The expect file a lock would give, from what is installed (scripts/gpu_expect.py says how).
timeout 60 python3 scripts/gpu_expect.py > "$OUT/expect.json" 2>> "$txt" || echo '{}' > "$OUT/expect.json"

start=$(date +%s)
timeout -k 10 200 python3 envkit/certify/payload/envkit_check --mode certify --expect "$OUT/expect.json" \
  --json --timeout 150 > "$OUT/gpu-validation.json" 2> "$OUT/gpu-validation.stderr"
echo "payload exit=$? wall_s=$(( $(date +%s) - start ))" >> "$txt"

# One line per check, then the acceptance verdicts of docs/gpu-validation.md.
python3 - "$OUT/gpu-validation.json" >> "$txt" 2>&1 <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"ACCEPTANCE no payload document: {e}")
print(f"status {doc['status']} in {doc['seconds']} s; facts {json.dumps(doc['facts'])}")
for c in doc["checks"]:
    print(f"{c['name']:<18} {c['status']:<7} {c['seconds']:>7.2f}  {c['message']}")
checks = {c["name"]: c for c in doc["checks"]}
sys.path.insert(0, "envkit/certify/payload/envkit_check")
from envkit_check_torch import REGISTRY  # imports no framework
gpu_only = [name for name, _, gpu in REGISTRY if gpu]
bad_gpu = [n for n in gpu_only if (checks.get(n) or {}).get("status") != "passed" and n != "telemetry"]
# this machine's own Python and /dev/shm are not an image's: their failures are the host's, not the GPU path's
host = [n for n in ("pip_check", "dataloader_cpu") if (checks.get(n) or {}).get("status") == "failed"]
bf16 = ((checks.get("matmul_tflops") or {}).get("value") or {}).get("bf16_matmul_tflops")
gpu = (doc["facts"].get("gpus") or [{}])[0].get("name", "")
print(f"ACCEPTANCE status certified: {doc['status'] == 'certified'}")
print(f"ACCEPTANCE every GPU check passed: {not bad_gpu} ({', '.join(bad_gpu) or 'none failed or skipped'}; "
      f"telemetry: {(checks.get('telemetry') or {}).get('status')})")
if host:
    print(f"NOTE failed because of this host, not the GPU path: {', '.join(host)} (see their messages above)")
print(f"ACCEPTANCE payload under 60 s: {doc['seconds'] < 60} ({doc['seconds']} s)")
if "H200" in gpu or "H100" in gpu:
    print(f"ACCEPTANCE bf16 matmul >= 80% of 790 TFLOP/s: {bf16 is not None and bf16 >= 632} ({bf16} TFLOP/s, {gpu})")
else:
    print(f"ACCEPTANCE bf16 matmul: {bf16} TFLOP/s on {gpu or 'no GPU'} (the 790 TFLOP/s reference is for H100/H200)")
PY
cat "$txt"
