"""verify and certify an image: the payload run inside it, its verdict judged again by the host (``envkit verify``,
``certify``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.perf import load_perf
from ..certify.certificate import certify_image, perf_metrics, slug
from ..certify.report import FILES, write_reports
from ..certify.verdict import decide
from ..errors import EngineError, VerificationError
from ..frameworks import expected
from ..images.builder import LOCK_LABEL
from ..images.layer_record import Recorded, compare, load_record, record_path
from ..lock import load_lock
from ..payload.harness import Verification, expect_from_labels, run_payload
from ..store.history import Store
from ..support.atomic import check_writable
from ..support.labels import made_reproducibly
from .standing import NO_GPU

if TYPE_CHECKING:
    from ..certify.certificate import Certificate
    from ..engine.protocol import Engine, ImageInfo


def expectations(engine: Engine, ref: str, lock_path: Path | None) -> tuple[ImageInfo, str, dict]:
    """The image, its lock hash, and what must hold inside it: its pin labels, or the lock's entry."""
    info = engine.inspect(ref)
    if info is None:
        raise EngineError(f"no image {ref!r} in the engine", hint="build it with `envkit build SPEC`")
    lock_hash = info.labels.get(LOCK_LABEL)
    if not lock_hash:
        raise VerificationError(f"{ref} was not built by envkit (it has no {LOCK_LABEL} label)",
                                hint="envkit verifies and certifies the images it builds, by the pins their labels "
                                     "carry: build this stack with `envkit build SPEC` and verify that image "
                                     "(`envkit ls` and `docker images` list the envkit images here)")
    if lock_path is None:
        return info, lock_hash, expect_from_labels(info.labels)
    match = [i for i in load_lock(lock_path).images if i.hash == lock_hash]
    if not match:
        raise VerificationError(f"{ref} was built from lock hash {lock_hash[:19]}, which {lock_path} does not contain",
                                hint="rebuild it with `envkit build SPEC`, or pass the lock it came from")
    return info, lock_hash, expected(match[0])


def verify_image(engine: Engine, ref: str, *, lock_path: Path | None = None) -> Verification:
    """Check inside ``ref`` that what it holds equals its pin labels (and the lock, if given). The payload's
    own verdict is judged again by the host's rules (``verdict.decide``, as certify does): a document that
    says ``verified`` beside a failed check, or claims a GPU check passed with no GPU, fails here too."""
    info, lock_hash, expect = expectations(engine, ref, lock_path)
    v = run_payload(engine, ref, expect)
    status, reasons = decide(v.raw, expect, gpu_requested=False)
    if status == "failed":
        v.status = "failed"
        # a failed check is already in mismatches as "name: message"; add what only the host saw
        v.mismatches += [r for r in reasons if not r.startswith("check ")]
    if lock_path is not None and (check := layers_check(info, lock_hash, lock_path)) is not None:
        v.checks.append(check)
        if check["status"] == "failed":
            v.status = "failed"
            v.mismatches.append(f"layers: {check['message']}")
    return v


def layers_check(info: ImageInfo, lock_hash: str, lock_path: Path) -> dict | None:
    """The image's environment layers against the lock's layer record (``images.layer_record``), as a check of the
    payload's shape; None when the lock has no record of this image."""
    name = next(i.name for i in load_lock(lock_path).images if i.hash == lock_hash)  # (expectations found it)
    recorded = load_record(lock_path).get(name)
    return None if recorded is None else check_layers(info, name, lock_hash, recorded, record_path(lock_path))


def check_layers(info: ImageInfo, name: str, lock_hash: str, recorded: Recorded, where: Path) -> dict:
    """The check ``layers`` of image ``name`` (``info``, at ``lock_hash``) against its entry in the record ``where``:
    passed, failed (naming each group that differs and both digests), or skipped (a builder made its layers, or the
    entry is of another lock hash), saying why. `verify --lock` and `nightly --reproducible` both ask it."""
    check = {"name": "layers", "value": None, "expected": recorded.environment(), "seconds": 0.0}
    if not made_reproducibly(info.labels):
        return {**check, "status": "skipped", "message": "a builder made this image's layers (they hold their files' "
                f"write times), so they are not compared with {where}: `envkit build SPEC "
                "--reproducible` makes the layers the record holds"}
    if recorded.lock_hash != lock_hash:
        return {**check, "status": "skipped", "message": f"{where} records lock hash "
                f"{recorded.lock_hash[:19]} for {name}, not this image's {lock_hash[:19]}: rewrite it with "
                "`envkit build SPEC --reproducible --record`"}
    result = compare(info.layers, info.labels, recorded)
    return {**check, "status": "passed" if result.matches else "failed", "message": result.message,
            "value": {g: got for g, _, got in result.differs} or recorded.environment()}


def certificate_file(gpu_model: str) -> str:
    """The certificate's file name in --reports: ``certificate-nvidia-h200.json``; ``certificate-cpu-only.json`` for a
    verification without a GPU (whose model is recorded as ``none``)."""
    return f"certificate-{'cpu-only' if gpu_model in NO_GPU else slug(gpu_model)}.json"


def certify(engine: Engine, ref: str, *, lock_path: Path | None, gpus: bool | None, out_dir: Path,
            store_url: str | None, timeout: int = 600) -> tuple[Certificate, dict[str, Path]]:
    """Certify ``ref``; write the certificate and the reports into ``out_dir`` (one set, replacing what is there),
    then record the certificate in the store. Both places are tried before the payload runs, so a path that cannot
    be used fails in seconds, not after the run; the store is written last, as the record ``run``'s gate trusts."""
    info, lock_hash, expect = expectations(engine, ref, lock_path)
    load_perf()  # the floors the verdict judges: a broken team perf.yaml fails now, not after the payload ran
    for name in FILES.values():
        check_writable(out_dir / name)
    with Store.open(store_url):
        pass
    use_gpus = engine.nvidia_runtime() if gpus is None else gpus
    cert = certify_image(engine, ref, expect, gpus=use_gpus, timeout=timeout)
    paths = write_reports([cert], out_dir, also={"certificate": (certificate_file(cert.gpu_model),
                                                                 cert.to_bytes())})
    with Store.open(store_url) as store:
        store.record_certificate(info.id, cert.gpu_model, cert.driver, status=cert.status, lock_hash=lock_hash,
                                 document=cert.to_json(), metrics=perf_metrics(cert))
    return cert, paths
