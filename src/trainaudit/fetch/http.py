"""Download artifacts in parallel with retries, back-off and size limits (httpx).

A failed artifact never stops the others: each result says what arrived and what did not, and
the audit reports the missing ones. Tokens travel only in headers and never appear in messages.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit, urlunsplit

import httpx

from trainaudit import __version__

DEFAULT_MAX_BYTES = 2 * 1024**3
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
Progress = Callable[[str, int, int | None], None]


@dataclass
class Download:
    name: str  # display name, no credentials
    url: str
    dest_name: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Fetched:
    download: Download
    path: Path | None = None
    size: int = 0
    error: str | None = None
    attempts: int = 0


def safe_url(url: str) -> str:
    """The URL without userinfo or query string (which may carry tokens)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._+-]+")


def _safe_name(name: str) -> str:
    return _UNSAFE_RUN.sub("_", name).strip("_")[:150] or "artifact"


class Fetcher:
    def __init__(self, *, retries: int = 3, backoff_s: float = 0.5, timeout_s: float = 60.0,
                 max_bytes: int = DEFAULT_MAX_BYTES, workers: int = 4, progress: Progress | None = None) -> None:
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_bytes = max_bytes
        self.workers = workers
        self.progress = progress
        self.client = httpx.Client(timeout=timeout_s, follow_redirects=True,
                                   headers={"User-Agent": f"trainaudit/{__version__}"})

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_json(self, url: str, headers: dict[str, str]) -> object:
        resp = self._request(url, headers)
        try:
            return resp.json()
        except ValueError:
            raise FetchError(f"{safe_url(url)}: response is not JSON") from None

    def _request(self, url: str, headers: dict[str, str]) -> httpx.Response:
        last = ""
        for attempt in range(self.retries + 1):
            try:
                resp = self.client.get(url, headers=headers)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}"
            else:
                if resp.status_code < 400:
                    return resp
                last = f"HTTP {resp.status_code}"
                if resp.status_code not in RETRY_STATUS:
                    raise FetchError(f"{safe_url(url)}: {last}{_hint(resp.status_code)}")
                self._sleep(attempt, resp)
                continue
            self._sleep(attempt, None)
        raise FetchError(f"{safe_url(url)}: {last} after {self.retries + 1} attempts")

    def _sleep(self, attempt: int, resp: httpx.Response | None) -> None:
        if attempt >= self.retries:
            return
        delay = self.backoff_s * (2**attempt)
        if resp is not None and resp.headers.get("Retry-After", "").isdigit():
            delay = min(float(resp.headers["Retry-After"]), 30.0)
        time.sleep(delay)

    def fetch_all(self, downloads: list[Download], dest: Path) -> list[Fetched]:
        dest.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            return list(pool.map(lambda d: self._fetch_one(d, dest), downloads))

    def _fetch_one(self, d: Download, dest: Path) -> Fetched:
        out = Fetched(d)
        target = dest / _safe_name(d.dest_name)
        for attempt in range(self.retries + 1):
            out.attempts = attempt + 1
            try:
                with self.client.stream("GET", d.url, headers=d.headers) as resp:
                    if resp.status_code >= 400:
                        msg = f"HTTP {resp.status_code}{_hint(resp.status_code)}"
                        if resp.status_code in RETRY_STATUS and attempt < self.retries:
                            self._sleep(attempt, resp)
                            continue
                        out.error = msg
                        return out
                    total = int(resp.headers["Content-Length"]) if resp.headers.get("Content-Length", "").isdigit() else None
                    if total is not None and total > self.max_bytes:
                        out.error = f"{total} bytes is over the size limit of {self.max_bytes}"
                        return out
                    size = 0
                    with open(target, "wb") as fh:
                        for chunk in resp.iter_bytes(1 << 20):
                            size += len(chunk)
                            if size > self.max_bytes:
                                raise _TooBig(size)
                            fh.write(chunk)
                            if self.progress:
                                self.progress(d.name, size, total)
                    if total is not None and size != total:
                        raise httpx.RemoteProtocolError(f"got {size} of {total} bytes")
                out.path, out.size, out.error = target, size, None
                return out
            except _TooBig as exc:
                target.unlink(missing_ok=True)
                out.error = f"more than {self.max_bytes} bytes (stopped at {exc.args[0]}): over the size limit"
                return out
            except httpx.TransportError as exc:
                target.unlink(missing_ok=True)
                out.error = f"{type(exc).__name__}: {str(exc)[:120]}"
                if attempt < self.retries:
                    self._sleep(attempt, None)
        return out


class _TooBig(Exception):
    pass


class FetchError(Exception):
    """A request that failed for good (the message names the URL without credentials)."""


def _hint(status: int) -> str:
    if status == 401:
        return " (unauthorized: set a valid token in the environment)"
    if status == 403:
        return " (forbidden: the token lacks access, or a rate limit)"
    if status == 404:
        return " (not found, or expired)"
    if status == 410:
        return " (gone: the artifact expired)"
    return ""
