"""A local HTTP server speaking the few Kubernetes API calls envkit's Job backend makes (create a ConfigMap and a
Job, read a Job's status, list its pods, read a pod's log, delete a Job): it proves the wire calls of
``envkit.dispatch.kube_api`` through the official client, not scheduling, admission or pods, which only a real
cluster does. Each Job goes through ``plan`` (one status per read: pending, running, complete or failed)."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

NOW = "2026-12-06T03:00:00Z"


@dataclass
class FakeApi:
    log: str  # what every pod printed
    plan: list[str] = field(default_factory=lambda: ["pending", "running", "complete"])
    node: str = "gpu-node-1"
    calls: list[tuple[str, str]] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)  # name -> body
    reads: dict[str, int] = field(default_factory=dict)
    config_maps: dict[str, dict] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    def phase(self, name: str) -> str:
        n = self.reads.get(name, 0)
        return self.plan[min(n, len(self.plan) - 1)]

    def job(self, name: str) -> dict:
        body = dict(self.jobs[name])
        self.reads[name] = self.reads.get(name, 0) + 1
        phase = self.phase(name)
        status: dict = {"startTime": NOW}
        if phase == "complete":
            status.update(succeeded=1, completionTime=NOW,
                          conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": NOW}])
        elif phase in ("deadline", "oom"):
            status.update(failed=1, conditions=[{"type": "Failed", "status": "True", "lastTransitionTime": NOW,
                                                 "reason": "DeadlineExceeded" if phase == "deadline"
                                                 else "BackoffLimitExceeded"}])
        elif phase == "running":
            status["active"] = 1
        body["status"] = status
        body["metadata"] = {**body["metadata"], "creationTimestamp": NOW}
        return body

    def pods(self, name: str) -> dict:
        phase = self.phase(name)
        pod_phase = {"pending": "Pending", "running": "Running", "complete": "Succeeded"}.get(phase, "Failed")
        status: dict = {"phase": pod_phase, "startTime": NOW}
        if phase == "pending":
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        if phase == "oom":
            status["containerStatuses"] = [{"name": "certify", "state": {"terminated": {
                "exitCode": 137, "reason": "OOMKilled"}}}]
        pod = {"metadata": {"name": f"{name}-pod", "creationTimestamp": NOW, "labels": {"job-name": name}},
               "spec": {"nodeName": "" if phase == "pending" else self.node}, "status": status}
        return {"kind": "PodList", "apiVersion": "v1", "items": [pod]}

    def start(self) -> tuple[ThreadingHTTPServer, str]:
        handler = type("BoundHandler", (Handler,), {"api": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    api: FakeApi

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: object, text: bool = False) -> None:
        data = (body if text else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def do_POST(self):
        url = urlparse(self.path)
        self.api.calls.append(("POST", url.path))
        body = self._body()
        if re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps", url.path):
            self.api.config_maps[body["metadata"]["name"]] = body
            return self._send(201, body)
        if re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs", url.path):
            self.api.jobs[body["metadata"]["name"]] = body
            return self._send(201, body)
        return self._send(404, {"kind": "Status", "code": 404})

    def do_GET(self):
        url = urlparse(self.path)
        self.api.calls.append(("GET", url.path))
        if m := re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)/status", url.path):
            if m[2] in self.api.jobs and m[2] not in self.api.deleted:
                return self._send(200, self.api.job(m[2]))
        elif re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", url.path):
            name = parse_qs(url.query)["labelSelector"][0].removeprefix("job-name=")
            return self._send(200, self.api.pods(name))
        elif re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", url.path):
            return self._send(200, self.api.log, text=True)
        return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

    def do_DELETE(self):
        url = urlparse(self.path)
        self.api.calls.append(("DELETE", url.path))
        name = url.path.rsplit("/", 1)[1]
        self.api.deleted.append(name)
        return self._send(200, {"kind": "Status", "status": "Success"})

