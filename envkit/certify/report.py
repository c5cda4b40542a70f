"""Reports over certificates: JSON, JUnit XML (for CI) and one self-contained HTML page.

The HTML page has no scripts and no external assets: styles are inline and the telemetry
plots are SVG polylines computed here. Every value goes through Jinja2's autoescaping, and
a Content-Security-Policy forbids scripts outright.
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import jinja2

from .. import __version__
from ..support.atomic import replace_all
from ..support.resources import templates_dir
from .certificate import Certificate, utc_now

REPORT_SCHEMA = "envkit.report/1"
TEMPLATE = "report.html.j2"
FILES = {"json": "report.json", "junit": "report.junit.xml", "html": "report.html"}
METRICS = (("util_pct", "GPU utilization", "%"), ("mem_used_mib", "Memory used", "MiB"),
           ("power_w", "Power", "W"), ("temp_c", "Temperature", "°C"))
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
CERTIFICATE_CASE = "certificate"  # the synthetic testcase carrying the host's verdict


# ---------------------------------------------------------------------------- JSON
def report_json(certificates: Sequence[Certificate], *, generated_at: str | None = None) -> bytes:
    doc = {"schema": REPORT_SCHEMA, "generated_at": generated_at or utc_now(), "envkit_version": __version__,
           "certificates": [c.to_json() for c in certificates]}
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"


# --------------------------------------------------------------------------- JUnit
def _secs(x: float) -> str:
    """JUnit time: seconds with at most 3 decimals (the schema's SUREFIRE_TIME pattern)."""
    return f"{max(float(x), 0.0):.3f}"


def _xml_text(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (control characters from a tool's output)."""
    return "".join(ch for ch in str(text) if ch in "\t\n\r" or (" " <= ch <= "\ud7ff") or ("\ue000" <= ch <= "\ufffd")
                   or ch >= "\U00010000")


def suite_name(cert: Certificate) -> str:
    """``image [GPU]``; a fleet job's names the fleet model and where it ran: ``image [H100: no GPU, node h100]``."""
    if cert.dispatch is None:
        return f"{cert.image} [{cert.gpu_model}]"
    d = cert.dispatch
    gpu = cert.gpu_model if cert.gpu_count else "no GPU"
    return f"{cert.image} [{d.fleet_model}: {gpu}, node {d.node or '?'}]"


def dispatched(cert: Certificate) -> str:
    """Where a fleet job ran, in words ("" for a local certification); a node without a GPU is said plainly."""
    d = cert.dispatch
    if d is None:
        return ""
    gpu = f"on {cert.gpu_model}" if cert.gpu_count else "no GPU ran (CPU checks only)"
    times = ", ".join(f"{what} {secs:.0f} s" for what, secs in (("queued", d.queue_s), ("ran", d.run_s))
                      if secs is not None)
    fault = f", {d.fault}" if d.fault else ""
    return (f"fleet model {d.fleet_model}: {d.scheduler} job {d.job_id or '?'} on node {d.node or '?'} "
            f"({d.runtime or 'docker'}), {gpu}; state {d.state or '?'}{fault}"
            + (f"; {times}" if times else "") + (f"; {d.attempts} attempts" if d.attempts > 1 else ""))


def report_junit(certificates: Sequence[Certificate], *, generated_at: str | None = None) -> bytes:
    """One <testsuite> per certificate, one <testcase> per check, plus a ``certificate`` case
    that fails with the host's reasons when the certificate failed."""
    generated_at = generated_at or utc_now()
    root = ET.Element("testsuites", name="envkit")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for i, cert in enumerate(certificates):
        suite = ET.SubElement(root, "testsuite", name=_xml_text(suite_name(cert)), id=str(i),
                              package=_xml_text(f"envkit.{cert.image}"), hostname="envkit",
                              timestamp=cert.created_at.replace("Z", "").split("+")[0][:19])
        props = ET.SubElement(suite, "properties")
        for key, value in (("image", cert.image), ("image_id", cert.image_id), ("lock_hash", cert.lock_hash),
                           ("gpu_model", cert.gpu_model), ("driver", cert.driver), ("status", cert.status),
                           ("payload_version", cert.payload_version), ("payload_sha256", cert.payload_sha256),
                           ("envkit_version", cert.envkit_version),
                           *((("dispatch", dispatched(cert)),) if cert.dispatch else ())):
            ET.SubElement(props, "property", name=key, value=_xml_text(value))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
        classname = _xml_text(f"envkit.{cert.image}")
        for check in cert.checks:
            case = ET.SubElement(suite, "testcase", classname=classname, name=_xml_text(check.name),
                                 time=_secs(check.seconds))
            counts["tests"] += 1
            counts["time"] += max(check.seconds, 0.0)
            if check.status == "failed":
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", message=_xml_text(check.message), type="check-failed")
                failure.text = _xml_text(check.message)
            elif check.status == "skipped":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_xml_text(check.message))
            out = ET.SubElement(case, "system-out")
            out.text = _xml_text(f"value: {json.dumps(check.value, sort_keys=True, default=str)}\n"
                                 f"expected: {json.dumps(check.expected, sort_keys=True, default=str)}\n"
                                 f"message: {check.message}")
        case = ET.SubElement(suite, "testcase", classname=classname, name=CERTIFICATE_CASE, time=_secs(0))
        counts["tests"] += 1
        if cert.status == "failed":
            counts["failures"] += 1
            text = "; ".join(cert.reasons) or "failed"
            failure = ET.SubElement(case, "failure", message=_xml_text(text), type="certificate-failed")
            failure.text = _xml_text("\n".join(cert.reasons))
        ET.SubElement(case, "system-out").text = _xml_text(
            f"status: {cert.status}\nimage_id: {cert.image_id}\ngpu: {cert.gpu_model}\ndriver: {cert.driver}")
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
        suite.set("time", _secs(counts["time"]))
        totals["time"] += counts["time"]
        ET.SubElement(suite, "system-out").text = _xml_text(f"created_at: {cert.created_at}")
        ET.SubElement(suite, "system-err").text = ""
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    root.set("time", _secs(totals["time"]))
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    comment = _xml_text(generated_at).replace("--", "- -")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<!-- envkit {__version__} report, generated {comment} -->\n'
            + body + "\n").encode()


# ---------------------------------------------------------------------------- HTML
@dataclass(frozen=True)
class Series:
    gpu: int
    color: str
    points: str  # "x,y x,y ..." in SVG user units


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    y_max: str
    x_min: str
    x_max: str
    series: tuple[Series, ...]
    peak: str


def _nice_ceiling(x: float) -> float:
    if x <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * exp >= x:
            return m * exp
    return 10 * exp


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.1f}"


def telemetry_charts(cert: Certificate, *, width: int = 560, height: int = 180) -> list[Chart]:
    """One chart per metric, one polyline per GPU; empty when the certificate has no samples."""
    samples = [s for s in cert.telemetry]
    if not samples:
        return []
    left, right, top, bottom = 56, 12, 14, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    t0 = min(s.t for s in samples)
    t1 = max(s.t for s in samples)
    span = (t1 - t0) or 1.0
    gpus = sorted({s.gpu for s in samples})
    charts = []
    for key, title, unit in METRICS:
        values = [getattr(s, key) for s in samples if getattr(s, key) is not None]
        if not values:
            continue
        top_value = 100.0 if key == "util_pct" else _nice_ceiling(max(values) * 1.05)
        series = []
        for n, gpu in enumerate(gpus):
            pts = [(s.t, getattr(s, key)) for s in samples if s.gpu == gpu and getattr(s, key) is not None]
            if not pts:
                continue
            coords = " ".join(
                f"{left + (t - t0) / span * plot_w:.1f},{top + plot_h - min(v / top_value, 1.0) * plot_h:.1f}"
                for t, v in sorted(pts)
            )
            series.append(Series(gpu=gpu, color=PALETTE[n % len(PALETTE)], points=coords))
        charts.append(Chart(title=title, unit=unit, width=width, height=height, left=left, top=top, plot_w=plot_w,
                            plot_h=plot_h, y_max=_fmt(top_value), x_min=_fmt(t0), x_max=_fmt(t1), series=tuple(series),
                            peak=_fmt(max(values))))
    return charts


def _short(value: object, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + f" ... ({len(text) - limit} more characters)"


def html_environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2", "xml"), default_for_string=True,
                                            default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def report_html(certificates: Sequence[Certificate], *, generated_at: str | None = None) -> bytes:
    items = []
    for i, cert in enumerate(certificates):
        counts = {s: sum(1 for c in cert.checks if c.status == s) for s in ("passed", "failed", "skipped")}
        items.append({"anchor": f"cert-{i}", "cert": cert, "counts": counts, "charts": telemetry_charts(cert),
                      "where": dispatched(cert),
                      "facts": [(k, _short(v, 400)) for k, v in sorted(cert.facts.items()) if k != "gpus"],
                      "gpus": cert.facts.get("gpus") or [],
                      "checks": [{"c": c, "value": _short(c.value), "expected": _short(c.expected, 400)}
                                 for c in cert.checks]})
    totals = {s: sum(1 for c in certificates if c.status == s) for s in ("certified", "verified", "failed")}
    text = html_environment().get_template(TEMPLATE).render(
        generated_at=generated_at or utc_now(), envkit_version=__version__, items=items, totals=totals,
        palette=PALETTE)
    return text.encode()


# --------------------------------------------------------------------------- files
def write_reports(certificates: Iterable[Certificate], out_dir: str | Path, *,
                  generated_at: str | None = None, also: dict[str, tuple[str, bytes]] | None = None) -> dict[str, Path]:
    """Write report.json, report.junit.xml and report.html into ``out_dir``, with ``also`` (more files: kind ->
    (name, bytes), e.g. the certificate), as one set: all rendered first, then replaced together or not at all
    (``atomic.replace_all``), so a refusal or a full disk never leaves one report new beside another old."""
    certificates = list(certificates)
    generated_at = generated_at or utc_now()
    out = Path(out_dir)
    rendered = {"json": report_json(certificates, generated_at=generated_at),
                "junit": report_junit(certificates, generated_at=generated_at),
                "html": report_html(certificates, generated_at=generated_at)}
    paths = {kind: out / FILES[kind] for kind in rendered}
    files = {paths[kind]: data for kind, data in rendered.items()}
    for kind, (name, data) in (also or {}).items():
        paths[kind] = out / name
        files[paths[kind]] = data
    replace_all({}, files)
    for path in files:
        os.chmod(path, 0o644)  # CI artifacts: readable by whoever serves them
    return paths
