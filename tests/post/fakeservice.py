"""A real HTTP server on 127.0.0.1 that answers like the GitHub issues REST API and a Slack incoming
webhook (paths, status codes and JSON shapes from docs.github.com/rest/issues and api.slack.com)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse


class FakeService:
    def __init__(self, token: str = "ghp_fake0123456789abcdefghijklmnop") -> None:
        self.token = token
        self.issues: dict[str, list[dict[str, Any]]] = {}  # "owner/repo" -> issues
        self.comments: dict[int, list[str]] = {}
        self.slack: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        svc = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
                data = (json.dumps(body) if ctype == "application/json" else str(body)).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def _route(self, method: str) -> None:
                u = urlparse(self.path)
                svc.requests.append((method, u.path))
                parts = u.path.strip("/").split("/")
                if parts[:2] == ["slack", "hook"]:
                    if parts[2:] != ["T000", "B000", "good"]:
                        return self._send(403, "invalid_token", "text/plain")
                    svc.slack.append(self._body())
                    return self._send(200, "ok", "text/plain")
                if self.headers.get("Authorization") != f"Bearer {svc.token}":
                    return self._send(401, {"message": "Bad credentials",
                                            "documentation_url": "https://docs.github.com/rest"})
                if len(parts) < 4 or parts[0] != "repos" or parts[3] != "issues":
                    return self._send(404, {"message": "Not Found"})
                repo = f"{parts[1]}/{parts[2]}"
                issues = svc.issues.setdefault(repo, [])
                if len(parts) == 4 and method == "GET":
                    q = parse_qs(u.query)
                    label = q.get("labels", [""])[0]
                    page, per = int(q.get("page", ["1"])[0]), int(q.get("per_page", ["30"])[0])
                    hits = [i for i in issues if i["state"] == q.get("state", ["open"])[0]
                            and (not label or label in [lab["name"] for lab in i["labels"]])]
                    return self._send(200, hits[(page - 1) * per: page * per])
                if len(parts) == 4 and method == "POST":
                    b = self._body()
                    n = len(issues) + 1
                    issue = {"number": n, "title": b["title"], "body": b["body"], "state": "open",
                             "labels": [{"name": x} for x in b.get("labels", [])],
                             "html_url": f"https://github.com/{repo}/issues/{n}"}
                    issues.append(issue)
                    return self._send(201, issue)
                n = int(parts[4])
                issue = next((i for i in issues if i["number"] == n), None)
                if issue is None:
                    return self._send(404, {"message": "Not Found"})
                if len(parts) == 5 and method == "PATCH":
                    issue.update({k: v for k, v in self._body().items() if k in ("title", "body", "state")})
                    return self._send(200, issue)
                if len(parts) == 6 and parts[5] == "comments" and method == "POST":
                    svc.comments.setdefault(n, []).append(self._body()["body"])
                    return self._send(201, {"id": 1, "body": svc.comments[n][-1]})
                return self._send(404, {"message": "Not Found"})

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PATCH(self) -> None:
                self._route("PATCH")

        return H
