from __future__ import annotations

import pytest

from tests.events.receiver import Receiver


@pytest.fixture
def receiver():
    running = Receiver().start()
    yield running
    running.stop()


@pytest.fixture
def local_hooks(settings):
    """Endpoints on loopback over http, as the test receiver is."""
    settings.SVC_WEBHOOK_ALLOW_HTTP = True
    settings.SVC_WEBHOOK_ALLOW_PRIVATE = True
