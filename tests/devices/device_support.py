"""Helpers shared by the device-module tests (plain functions and classes; the fixtures
that use them live in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NOW = 1_750_000_000  # a fixed instant well inside every test licence's term
DEVICE = "cam-0001"


class FakeClock:
    """Injected engine clock; tests move it explicitly."""

    def __init__(self, now: float = NOW) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def claims_for(**overrides: Any) -> dict[str, Any]:
    """Claims of a unit licence bound to DEVICE, valid at NOW; keyword overrides."""
    claims: dict[str, Any] = {
        "lic": "LIC-0123456789",
        "sku": "VISION-PRO",
        "sub": "CUST-0123456789",
        "iss": "svc-licensing",
        "dev": DEVICE,
        "ent": {"detect": True, "defect": True, "ppe": True, "anpr": False},
        "lim": {"max_streams": 2, "max_fps": 15, "api_calls": 0},
        "iat": NOW - 86400,
        "nbf": NOW - 86400,
        "exp": NOW + 30 * 86400,
        "grace_days": 14,
        "act": "optional",
    }
    claims.update(overrides)
    return claims


Answer = Callable[[dict[str, Any]], tuple[int, Any]]


class FakeService:
    """Answers of the licensing service, scripted per route; records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Answer] = {}
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    def on(self, method: str, path: str, answer: Answer) -> None:
        self.routes[(method, path)] = answer

    def reply(self, method: str, path: str, status: int, body: Any) -> None:
        self.on(method, path, lambda request: (status, body))

    def calls(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]
