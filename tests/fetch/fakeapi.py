"""A real HTTP server on 127.0.0.1 that answers like the GitHub Actions and GitLab job APIs.

Paths and JSON shapes follow the public docs (see trainaudit/fetch/providers.py). Behaviour knobs:
``fail_once`` paths answer 503 the first time (retries), ``missing`` paths answer 404,
``require_token`` makes every request without the token answer 401.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class FakeCI:
    def __init__(self, token: str = "ghp_testtoken0123456789abcdefghij") -> None:
        self.token = token
        self.files: dict[str, tuple[bytes, str]] = {}  # path -> (body, content type)
        self.redirects: dict[str, str] = {}
        self.fail_once: set[str] = set()
        self.missing: set[str] = set()
        self.require_token = False
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def json(self, path: str, obj: object) -> None:
        self.files[path] = (json.dumps(obj).encode(), "application/json")

    def blob(self, path: str, data: bytes, ctype: str = "application/octet-stream") -> None:
        self.files[path] = (data, ctype)

    # -- provider shapes -------------------------------------------------------------------
    def github_run(self, owner: str, repo: str, run: int, jobs: dict[int, tuple[str, str, bytes]],
                   artifacts: dict[str, bytes], expired: tuple[str, ...] = ()) -> None:
        base = f"/repos/{owner}/{repo}/actions"
        self.json(f"{base}/runs/{run}/jobs?per_page=100", {"total_count": len(jobs), "jobs": [
            {"id": jid, "name": name, "status": "completed", "conclusion": concl}
            for jid, (name, concl, _) in jobs.items()]})
        for jid, (_, _, log) in jobs.items():
            # the API redirects to blob storage, as GitHub does
            self.redirects[f"{base}/jobs/{jid}/logs"] = f"/blobs/job-{jid}.txt"
            self.blob(f"/blobs/job-{jid}.txt", log, "text/plain")
        arts = []
        for i, (name, data) in enumerate(artifacts.items(), 1):
            url = f"{self.url}{base}/artifacts/{i}/zip"
            arts.append({"id": i, "name": name, "size_in_bytes": len(data), "expired": False,
                         "archive_download_url": url})
            self.redirects[f"{base}/artifacts/{i}/zip"] = f"/blobs/artifact-{i}.zip"
            self.blob(f"/blobs/artifact-{i}.zip", data, "application/zip")
        for name in expired:
            arts.append({"id": 99, "name": name, "size_in_bytes": 1, "expired": True,
                         "archive_download_url": f"{self.url}{base}/artifacts/99/zip"})
        self.json(f"{base}/runs/{run}/artifacts?per_page=100", {"total_count": len(arts), "artifacts": arts})

    def gitlab_job(self, project: str, job: int, trace: bytes, artifacts: bytes | None) -> None:
        from urllib.parse import quote

        base = f"/api/v4/projects/{quote(project, safe='')}/jobs/{job}"
        self.blob(f"{base}/trace", trace, "text/plain")
        if artifacts is not None:
            self.blob(f"{base}/artifacts", artifacts, "application/zip")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        ci = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                return

            def do_GET(self) -> None:
                path = self.path
                ci.requests.append((path, dict(self.headers)))
                auth = self.headers.get("Authorization", "") + self.headers.get("PRIVATE-TOKEN", "")
                if ci.require_token and ci.token not in auth:
                    return self._send(401, b'{"message": "Bad credentials"}', "application/json")
                if path in ci.fail_once:
                    ci.fail_once.discard(path)
                    return self._send(503, b"busy", "text/plain")
                if path in ci.missing:
                    return self._send(404, b'{"message": "Not Found"}', "application/json")
                if path in ci.redirects:
                    self.send_response(302)
                    self.send_header("Location", ci.redirects[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                for key in (path, path.split("?", 1)[0]):  # exact first: list endpoints carry ?per_page
                    if key in ci.files:
                        body, ctype = ci.files[key]
                        return self._send(200, body, ctype)
                return self._send(404, b'{"message": "Not Found"}', "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
