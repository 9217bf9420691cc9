"""Version of the device module, reported to the service as ``sdk_version``."""

from __future__ import annotations

__version__ = "1.2.0"
