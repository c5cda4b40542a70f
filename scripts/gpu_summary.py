"""One line per check of a payload document, then the acceptance verdicts of docs/gpu-validation.md.

Run: python3 scripts/gpu_summary.py DOC.json [torch|jax]   (used by scripts/gpu-validate.sh)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAYLOAD = Path(__file__).resolve().parent.parent / "envkit" / "payload" / "envkit_check"


def main(path: str, framework: str = "torch") -> int:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        print(f"ACCEPTANCE ({framework}) no payload document: {e}")
        return 1
    print(f"[{framework}] status {doc['status']} in {doc['seconds']} s; facts {json.dumps(doc['facts'])}")
    for c in doc["checks"]:
        print(f"{c['name']:<18} {c['status']:<7} {c['seconds']:>7.2f}  {c['message']}")
    checks = {c["name"]: c for c in doc["checks"]}
    sys.path.insert(0, str(PAYLOAD))
    module = __import__(f"envkit_check_{framework}")  # the payload's registry; imports no framework
    gpu_only = [name for name, _, gpu in module.REGISTRY if gpu]
    bad_gpu = [n for n in gpu_only if (checks.get(n) or {}).get("status") != "passed" and n != "telemetry"]
    # this machine's own Python and /dev/shm are not an image's: their failures are the host's, not the GPU path's
    host = [n for n in ("pip_check", "dataloader_cpu") if (checks.get(n) or {}).get("status") == "failed"]
    bf16 = ((checks.get("matmul_tflops") or {}).get("value") or {}).get("bf16_matmul_tflops")
    gpu = (doc["facts"].get("gpus") or [{}])[0].get("name", "")
    print(f"ACCEPTANCE ({framework}) status certified: {doc['status'] == 'certified'}")
    print(f"ACCEPTANCE ({framework}) every GPU check passed: {not bad_gpu} "
          f"({', '.join(bad_gpu) or 'none failed or skipped'}; telemetry: {(checks.get('telemetry') or {}).get('status')})")
    if host:
        print(f"NOTE failed because of this host, not the GPU path: {', '.join(host)} (see their messages above)")
    print(f"ACCEPTANCE ({framework}) payload under 60 s: {doc['seconds'] < 60} ({doc['seconds']} s)")
    if "H200" in gpu or "H100" in gpu:
        print(f"ACCEPTANCE ({framework}) bf16 matmul >= 80% of 790 TFLOP/s: {bf16 is not None and bf16 >= 632} "
              f"({bf16} TFLOP/s, {gpu})")
    else:
        print(f"ACCEPTANCE ({framework}) bf16 matmul: {bf16} TFLOP/s on {gpu or 'no GPU'} "
              "(the 790 TFLOP/s reference is for H100/H200)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
