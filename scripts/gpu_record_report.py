"""The certificates and reports envkit would make of a GPU record's payload documents.

A record (docs/gpu-validation/<date>-<gpu>/) holds what `scripts/gpu-validate.sh` wrote on a GPU
machine with no Docker: payload documents, not certificates. This builds the certificate of each
document with the host's verdict (`certificate_from`, as `envkit certify` does) and writes the three
reports (JSON, JUnit XML, HTML with the telemetry plots) into RECORD/report/, so a reader sees what a
certification on that GPU looks like. The image is named as what it was: a native run, no image.

Run: .venv/bin/python scripts/gpu_record_report.py docs/gpu-validation/2026-12-04-h200
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envkit import __version__  # noqa: E402
from envkit.certify.certificate import certificate_from  # noqa: E402
from envkit.certify.report import write_reports  # noqa: E402

# document -> (its expect file, the summary whose first line is the run's date)
RUNS = {"gpu-validation.json": ("expect.json", "gpu-validation.txt"),
        "run3-gpu-validation-jax.json": ("expect-jax.json", "run3-gpu-validation.txt")}


def main(record: str) -> int:
    root = Path(record)
    certs = []
    for doc_name, (expect_name, summary) in RUNS.items():
        if not (root / doc_name).exists():
            continue
        doc = json.loads((root / doc_name).read_text())
        expect = json.loads((root / expect_name).read_text())
        framework = doc["facts"].get("framework", "torch")
        when = (root / summary).read_text().splitlines()[0]
        certs.append(certificate_from(doc, expect, image=f"native {framework} run on the device machine (no image)",
                                      image_id="none", lock_hash="", gpu_requested=True, created_at=when,
                                      envkit_version=__version__))
    paths = write_reports(certs, root / "report", generated_at=certs[0].created_at)
    for cert in certs:
        print(f"{cert.image}: {cert.status} on {cert.gpu_model}, driver {cert.driver} {list(cert.reasons)}")
    print("wrote", ", ".join(str(p) for p in paths.values()))
    return 0 if all(c.status == "certified" for c in certs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
