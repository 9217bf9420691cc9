"""The numbers a device and the service agree on: one home for both.

The service refuses a usage record outside these bounds (contract §7), so the device
refuses to count past them and sets aside a spooled record beyond them instead of
sending it forever. Every time the device reads from its clock or a file must lie in
``0..LAST_SECOND``.
"""

from __future__ import annotations

LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z: the last Unix second a date holds
MAX_COUNTER = 10**12  # the largest value of one counter in one usage record
