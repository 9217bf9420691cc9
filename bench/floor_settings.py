"""Settings of the benchmark's own gunicorn: the service's settings unchanged, plus a
bare DRF view (``bench.floor_urls``) to measure the framework's floor against. Only
``bench/bench_revocations.py`` selects it (``DJANGO_SETTINGS_MODULE``)."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.floor_urls"
