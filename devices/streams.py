"""Video streams of an engine: each open stream takes frames per window of one second of
the engine's clock, up to the licence's ``lim.max_fps`` (:meth:`devices.Engine.admit_frame`).
"""

from __future__ import annotations

import math
import time
from typing import Any


class Stream:
    """One open video stream; frames are admitted per window of one second of the engine
    clock (:meth:`Engine.admit_frame`)."""

    __slots__ = (
        "number",
        "open",
        "frames_admitted",
        "frames_dropped",
        "_second",
        "_admitted",
        "_opened",
        "_engine",
    )

    def __init__(self, number: int, engine: Any = None) -> None:
        self._engine = engine  # the engine that opened it: only its streams take frames
        self.number = number
        self.open = True
        self.frames_admitted = 0
        self.frames_dropped = 0
        self._second = -1  # the clock second of the current window: it only moves forward
        self._admitted = 0  # frames admitted in the current window
        self._opened = 0.0  # time.monotonic() when the current window opened

    def admit(self, now: float, max_fps: int) -> bool:
        """Whether this stream takes a frame at clock time ``now`` (its engine checks
        the stream and the clock first). Windows never move backwards, so no clock can
        buy frames; a window also opens again once a real second has passed
        (``time.monotonic``), so a clock stepped back cannot stall the video."""
        second = math.floor(now)
        if second > self._second:
            self._second, self._admitted, self._opened = second, 0, time.monotonic()
        elif self._admitted >= max_fps and time.monotonic() - self._opened >= 1:
            self._admitted, self._opened = 0, time.monotonic()
        if self._admitted >= max_fps or not self.open:
            self.frames_dropped += 1
            return False
        self._admitted += 1
        self.frames_admitted += 1
        return True
