"""Reports: JSON, JUnit XML (validated against a JUnit XSD) and the self-contained HTML page."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from envkit.certify.report import (CERTIFICATE_CASE, report_html, report_json, report_junit, telemetry_charts,
                                   write_reports)

from tests.unit.certify.test_certificate import build, cpu_doc, gpu_doc, set_check

GENERATED = "2025-06-02T08:00:00Z"

# The Ant/Jenkins JUnit format, in the shape of the Jenkins "junit-10.xsd" schema: <testsuites> of
# <testsuite>s (properties?, testcase*, system-out?, system-err?), each <testcase> holding any of
# skipped/error/failure/system-out/system-err; times are SUREFIRE_TIME (at most 3 decimals).
# One addition: a `skipped` count on <testsuites> (JUnit 5, pytest and surefire write it too).
JUNIT_XSD = """<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:simpleType name="SUREFIRE_TIME">
    <xs:restriction base="xs:string">
      <xs:pattern value="(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\\.[0-9]{0,3})?"/>
    </xs:restriction>
  </xs:simpleType>
  <xs:simpleType name="COUNT">
    <xs:restriction base="xs:nonNegativeInteger"/>
  </xs:simpleType>
  <xs:simpleType name="ISO8601_DATETIME_PATTERN">
    <xs:restriction base="xs:dateTime">
      <xs:pattern value="[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"/>
    </xs:restriction>
  </xs:simpleType>
  <xs:complexType name="outcome" mixed="true">
    <xs:attribute name="type" type="xs:string" use="optional"/>
    <xs:attribute name="message" type="xs:string" use="optional"/>
  </xs:complexType>
  <xs:element name="failure" type="outcome"/>
  <xs:element name="error" type="outcome"/>
  <xs:element name="skipped">
    <xs:complexType mixed="true">
      <xs:attribute name="message" type="xs:string" use="optional"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="system-out" type="xs:string"/>
  <xs:element name="system-err" type="xs:string"/>
  <xs:element name="properties">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="property" minOccurs="0" maxOccurs="unbounded">
          <xs:complexType>
            <xs:attribute name="name" type="xs:string" use="required"/>
            <xs:attribute name="value" type="xs:string" use="required"/>
          </xs:complexType>
        </xs:element>
      </xs:sequence>
    </xs:complexType>
  </xs:element>
  <xs:element name="testcase">
    <xs:complexType>
      <xs:choice minOccurs="0" maxOccurs="unbounded">
        <xs:element ref="skipped"/>
        <xs:element ref="error"/>
        <xs:element ref="failure"/>
        <xs:element ref="system-out"/>
        <xs:element ref="system-err"/>
      </xs:choice>
      <xs:attribute name="name" type="xs:string" use="required"/>
      <xs:attribute name="classname" type="xs:string" use="optional"/>
      <xs:attribute name="assertions" type="xs:string" use="optional"/>
      <xs:attribute name="time" type="SUREFIRE_TIME" use="optional"/>
      <xs:attribute name="status" type="xs:string" use="optional"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="testsuite">
    <xs:complexType>
      <xs:sequence>
        <xs:element ref="properties" minOccurs="0"/>
        <xs:element ref="testcase" minOccurs="0" maxOccurs="unbounded"/>
        <xs:element ref="system-out" minOccurs="0"/>
        <xs:element ref="system-err" minOccurs="0"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string" use="required"/>
      <xs:attribute name="tests" type="COUNT" use="required"/>
      <xs:attribute name="failures" type="COUNT" use="optional"/>
      <xs:attribute name="errors" type="COUNT" use="optional"/>
      <xs:attribute name="skipped" type="COUNT" use="optional"/>
      <xs:attribute name="disabled" type="COUNT" use="optional"/>
      <xs:attribute name="time" type="SUREFIRE_TIME" use="optional"/>
      <xs:attribute name="timestamp" type="ISO8601_DATETIME_PATTERN" use="optional"/>
      <xs:attribute name="hostname" type="xs:string" use="optional"/>
      <xs:attribute name="id" type="xs:string" use="optional"/>
      <xs:attribute name="package" type="xs:string" use="optional"/>
      <xs:attribute name="file" type="xs:string" use="optional"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="testsuites">
    <xs:complexType>
      <xs:sequence>
        <xs:element ref="testsuite" minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string" use="optional"/>
      <xs:attribute name="time" type="SUREFIRE_TIME" use="optional"/>
      <xs:attribute name="tests" type="COUNT" use="optional"/>
      <xs:attribute name="failures" type="COUNT" use="optional"/>
      <xs:attribute name="errors" type="COUNT" use="optional"/>
      <xs:attribute name="skipped" type="COUNT" use="optional"/>
      <xs:attribute name="disabled" type="COUNT" use="optional"/>
    </xs:complexType>
  </xs:element>
</xs:schema>
"""

XSS = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def schema():
    xmlschema = pytest.importorskip("xmlschema")
    return xmlschema.XMLSchema(JUNIT_XSD)


@pytest.fixture(scope="module")
def certs():
    certified = build(gpu_doc())
    failed = build(set_check(gpu_doc(), "dataloader", "failed", f"workers died {XSS} & more"))
    verified = build(cpu_doc(), gpu_requested=False)
    return [certified, failed, verified]


def test_junit_validates_and_counts(schema, certs):
    data = report_junit(certs, generated_at=GENERATED)
    schema.validate(data.decode())
    root = ET.fromstring(data)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 3
    for cert, suite in zip(certs, suites):
        cases = suite.findall("testcase")
        assert suite.get("name") == f"{cert.image} [{cert.gpu_model}]"
        assert len(cases) == len(cert.checks) + 1 == int(suite.get("tests"))
        assert {c.get("classname") for c in cases} == {f"envkit.{cert.image}"}
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
        assert suite.get("errors") == "0"
        assert float(suite.get("time")) == pytest.approx(sum(c.seconds for c in cert.checks), abs=1e-3)
    # certified: nothing failed or skipped; failed: the check and the certificate case; verified: 10 GPU skips
    assert [(s.get("failures"), s.get("skipped")) for s in suites] == [("0", "0"), ("2", "0"), ("0", "10")]
    for key in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(key)) == sum(int(s.get(key)) for s in suites)
    assert float(root.get("time")) == pytest.approx(sum(float(s.get("time")) for s in suites), abs=1e-3)
    failing = suites[1].find(f"testcase[@name='{CERTIFICATE_CASE}']/failure")
    assert "check dataloader failed" in failing.get("message")
    bad = suites[1].find("testcase[@name='dataloader']/failure")
    assert bad.get("message") == f"workers died {XSS} & more"  # XML-escaped on the wire, intact when parsed


def test_junit_schema_rejects_a_malformed_report(schema):
    with pytest.raises(pytest.importorskip("xmlschema").XMLSchemaValidationError):
        schema.validate('<testsuites><testsuite name="x" tests="1"><testcase time="1.5"/></testsuite></testsuites>')


def test_junit_structure_with_junitparser(certs, tmp_path):
    junitparser = pytest.importorskip("junitparser")
    path = tmp_path / "r.xml"
    path.write_bytes(report_junit(certs, generated_at=GENERATED))
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.tests for s in suites] == [len(c.checks) + 1 for c in certs]
    assert [s.failures for s in suites] == [0, 2, 0]
    assert [s.skipped for s in suites] == [0, 0, 10]


def test_junit_strips_characters_xml_cannot_carry(schema):
    cert = build(set_check(gpu_doc(), "pip_check", "failed", "bad\x00output\x1b[31m"))
    data = report_junit([cert], generated_at=GENERATED)
    schema.validate(data.decode())
    assert b"\x00" not in data and b"\x1b" not in data


def test_json_report(certs):
    doc = json.loads(report_json(certs, generated_at=GENERATED))
    assert doc["schema"] == "envkit.report/1" and doc["generated_at"] == GENERATED
    assert [c["status"] for c in doc["certificates"]] == ["certified", "failed", "verified"]
    assert doc["certificates"][0] == json.loads(certs[0].to_bytes())


def test_html_escapes_every_value(certs):
    html = report_html(certs, generated_at=GENERATED).decode()
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more" in html
    assert "Content-Security-Policy" in html


def test_html_escapes_image_refs_and_facts():
    doc = gpu_doc(gpus=({"index": 0, "name": 'NVIDIA "H200" <b>', "cc": "9.0", "memory_gib": 1},))
    cert = build(doc).model_copy(update={"image": "evil<img src=x onerror=alert(1)>"})
    html = report_html([cert], generated_at=GENERATED).decode()
    assert "<img" not in html and "<b>" not in html
    assert "evil&lt;img src=x onerror=alert(1)&gt;" in html and "&#34;H200&#34; &lt;b&gt;" in html


def test_html_summary_and_svg_when_telemetry(certs):
    html = report_html(certs, generated_at=GENERATED).decode()
    assert len(re.findall(r'<tr class="summary-row', html)) == 3
    for cert in certs:
        assert f"row-{cert.status}" in html
    # telemetry on the two GPU certificates: 4 charts each, one polyline per GPU
    assert html.count("<svg") == 8 and html.count("<polyline") == 8
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    points = re.search(r'points="([^"]+)"', html).group(1).split()
    assert len(points) == 12 and all(re.fullmatch(r"[0-9.]+,[0-9.]+", p) for p in points)


def test_no_svg_without_telemetry(certs):
    html = report_html([certs[2]], generated_at=GENERATED).decode()
    assert "<svg" not in html and telemetry_charts(certs[2]) == []


def test_chart_geometry_stays_inside_the_plot(certs):
    for chart in telemetry_charts(certs[0]):
        for s in chart.series:
            for p in s.points.split():
                x, y = map(float, p.split(","))
                assert chart.left <= x <= chart.left + chart.plot_w
                assert chart.top <= y <= chart.top + chart.plot_h


def test_write_reports(tmp_path, certs, schema):
    paths = write_reports(certs, tmp_path / "out", generated_at=GENERATED)
    assert {k: p.name for k, p in paths.items()} == {"json": "report.json", "junit": "report.junit.xml",
                                                    "html": "report.html"}
    schema.validate(paths["junit"].read_text())
    assert json.loads(paths["json"].read_text())["schema"] == "envkit.report/1"
    assert paths["html"].read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "report.json", "report.junit.xml"]
    again = write_reports(certs, tmp_path / "out", generated_at=GENERATED)
    assert all(again[k].read_bytes() == paths[k].read_bytes() for k in paths)  # deterministic
