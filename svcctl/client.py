"""A small client of the ``/v1/admin`` API (urllib, JSON, ``X-Admin-Key``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from decimal import Decimal
from typing import IO, Any

USER_AGENT = "svcctl/1"


class ApiError(Exception):
    """The server refused (``status`` set, ``detail`` is its message) or could not be
    reached (``status`` None)."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status

    def __str__(self) -> str:
        return f"{self.detail} (HTTP {self.status})" if self.status else self.detail


def segment(value: str) -> str:
    """An id as one path segment (``/``, ``?``, ``#``, spaces quoted)."""
    return urllib.parse.quote(value, safe="")


class AdminClient:
    def __init__(self, base_url: str, admin_key: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_key = admin_key
        self.timeout = timeout

    def get(self, path: str, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        return self._send("GET", path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", path, body)

    def delete(self, path: str) -> Any:
        return self._send("DELETE", path)

    def download(self, path: str, out: IO[bytes], **query: Any) -> int:
        """GET ``path`` and copy the answer to ``out`` as it arrives (a streamed export,
        never held whole in memory). Returns the bytes written."""
        params = {k: v for k, v in query.items() if v is not None}
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        url = f"{self.base_url}/v1/admin/{path.lstrip('/')}"
        request = urllib.request.Request(url)  # noqa: S310 - operator-given URL
        request.add_header("X-Admin-Key", self.admin_key)
        request.add_header("User-Agent", USER_AGENT)
        written = 0
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                while chunk := response.read(1 << 16):
                    out.write(chunk)
                    written += len(chunk)
        except urllib.error.HTTPError as exc:
            raise ApiError(_detail(exc), exc.code) from None
        except urllib.error.URLError as exc:
            raise ApiError(f"cannot reach {self.base_url}: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise ApiError(f"cannot reach {self.base_url}: {exc}") from None
        return written

    def server_time(self) -> int | None:
        """The service's clock, Unix seconds (``time`` of ``/healthz``, which answers it
        even when unhealthy); None when it cannot be read."""
        request = urllib.request.Request(f"{self.base_url}/healthz")  # noqa: S310
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                return None
        except (OSError, ValueError):  # unreachable, timed out, not JSON
            return None
        moment = body.get("time") if isinstance(body, dict) else None
        return moment if type(moment) is int else None

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}/v1/admin/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - operator-given URL
        request.add_header("X-Admin-Key", self.admin_key)
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                # Money as Decimal, never float, all the way to a CSV cell.
                return json.loads(response.read() or b"null", parse_float=Decimal)
        except urllib.error.HTTPError as exc:
            raise ApiError(_detail(exc), exc.code) from None
        except urllib.error.URLError as exc:
            raise ApiError(f"cannot reach {self.base_url}: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise ApiError(f"cannot reach {self.base_url}: {exc}") from None
        except json.JSONDecodeError:
            raise ApiError(f"{url} did not answer JSON; is --url the licensing service?") from None


def _detail(exc: urllib.error.HTTPError) -> str:
    raw = exc.read()
    try:
        body = json.loads(raw)
    except ValueError:
        text = raw.decode("utf-8", "replace").strip()
        return text[:300] or exc.reason or "error"
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return json.dumps(body)[:300]
