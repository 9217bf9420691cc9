"""Signer benchmark (issue 14): new activations per second with the key file and with the
key in a PKCS#11 token (SoftHSM2), in the same run on the same database.

Two gunicorns (BENCH_WORKERS gthread workers x 4 threads each) serve one PostgreSQL
database, one signing with ``SVC_SIGNER=file``, the other with ``SVC_SIGNER=pkcs11``
against a SoftHSM2 token initialised in a temporary directory. Rounds alternate between
them (only the one being measured gets load); the median of the rounds is printed with
the ratio, and beside it the raw signatures per second of each signer in this process
(one thread), which is what the token itself costs.

Needs SoftHSM2 (``apt-get install softhsm2``; .ci/run installs it); without it the
benchmark says so and exits 0. Run from the repository root:
``python bench/bench_signer.py`` (or ``make bench``). Settings: BENCH_PG, BENCH_WORKERS,
BENCH_CONNECTIONS, BENCH_SECONDS, BENCH_ROUNDS (as bench_hotpaths).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import _support  # noqa: E402 - bench/_support.py, beside this script
from bench_hotpaths import CONNECTIONS, PG, ROUNDS, SECONDS, WORKERS, Target, rate  # noqa: E402

DB_NAME = "svc_bench_signer"
MODULES = ("/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so")
TOKEN, KEY, PIN = "svc-bench", "svc-signing", "bench-pin-0001"
BATCHES = 16
SIGNATURES = 2000  # per signer, for the raw signing rate


def softhsm(directory: Path) -> dict[str, str] | None:
    """A SoftHSM2 token in ``directory`` with an Ed25519 key pair; the environment that
    selects it (None when SoftHSM2 is not installed)."""
    module = next((path for path in MODULES if Path(path).is_file()), "")
    if not module or shutil.which("softhsm2-util") is None:
        return None
    tokens = directory / "tokens"
    tokens.mkdir()
    conf = directory / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", TOKEN, "--pin", PIN]
        + ["--so-pin", "bench-so-0001"],
        check=True,
        capture_output=True,
    )
    pin = directory / "pin"
    pin.write_text(PIN)
    pin.chmod(0o600)
    return {
        "SOFTHSM2_CONF": str(conf),
        "SVC_SIGNER": "pkcs11",
        "SVC_PKCS11_MODULE": module,
        "SVC_PKCS11_TOKEN_LABEL": TOKEN,
        "SVC_PKCS11_KEY_LABEL": KEY,
        "SVC_PKCS11_PIN_FILE": str(pin),
    }


def load() -> list[str]:
    from customers.services import customer_create
    from licensing.services import batch_issue

    customer = customer_create(name="Bench signer", kind="oem", id="SIGNER")
    return [
        batch_issue(customer_id=customer.id, sku="DETECT-STD", units=10_000_000).license.token
        for _ in range(BATCHES)
    ]


def signing_rates(hsm: dict[str, str]) -> dict[str, float]:
    """Signatures per second of each signer in this process, one thread."""
    from signing import signers
    from signing.pkcs11_token import Pkcs11Config

    rates = {}
    file_signer = signers.FileSigner(os.environ["SVC_SIGNING_KEY_FILE"])
    hsm_signer = signers.Pkcs11Signer(Pkcs11Config(**_config(hsm)))
    for name, signer in (("file", file_signer), ("pkcs11", hsm_signer)):
        message = b"SVC1." + b"x" * 400  # about a unit licence's signing input
        started = time.perf_counter()
        for _ in range(SIGNATURES):
            signer.sign(message)
        rates[name] = SIGNATURES / (time.perf_counter() - started)
        signer.close()
    return rates


def main() -> int:
    begun = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        hsm = softhsm(directory)
        if hsm is None:
            print("SoftHSM2 is not installed (apt-get install softhsm2): nothing measured")
            return 0
        _support.recreate_database(PG, DB_NAME)
        _support.configure_django(directory, PG, DB_NAME)
        from signing.pkcs11_token import Pkcs11Config, generate_key

        generate_key(Pkcs11Config(**_config(hsm)))
        tokens = load()
        raw = signing_rates(hsm)
        from django.db import connection

        connection.close()
        env = {
            **os.environ,
            "SVC_DB_CONN_MAX_AGE": "600",
            "SVC_ACTIVATION_ALLOWLIST": "127.0.0.1/32",
        }
        servers = {}
        try:
            for name, extra in (("file", {"SVC_SIGNER": "file"}), ("pkcs11", hsm)):
                port = _support.free_port()
                servers[name] = (
                    _support.start_gunicorn(
                        {**env, **extra},
                        port,
                        directory / f"gunicorn-{name}.log",
                        workers=WORKERS,
                        threads=4,
                        timeout=60,
                    ),
                    port,
                )
            print(f"measuring {ROUNDS} rounds of {SECONDS:g} s per signer ...", flush=True)
            results: dict[str, list[float]] = {"file": [], "pkcs11": []}
            for n in range(ROUNDS):
                for name, (_, port) in servers.items():
                    target = Target(
                        f"new activation ({name})", "POST", "/v1/activate", tokens=tokens,
                        devices="new",
                    )  # fmt: skip
                    results[name].append(rate(port, target, f"{name}{n}", directory))
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=20)
    _support.recreate_database(PG, DB_NAME, create=False)

    file_rate = statistics.median(results["file"])
    hsm_rate = statistics.median(results["pkcs11"])
    tool = "wrk" if shutil.which("wrk") else "a Python client (no wrk)"
    print(
        f"\nsigner: {os.cpu_count()} CPUs; gunicorn {WORKERS} gthread workers x 4 threads, "
        f"PostgreSQL; {tool}, {CONNECTIONS} connections; new activations over {BATCHES} "
        f"batches, median of {ROUNDS} interleaved {SECONDS:g} s rounds"
    )
    print(f"{'signer':<34}{'activations/s':>14}{'signatures/s (1 thread)':>26}")
    print(f"{'file (SVC_SIGNING_KEY_FILE)':<34}{file_rate:>14,.0f}{raw['file']:>26,.0f}")
    print(f"{'pkcs11 (SoftHSM2 2.6)':<34}{hsm_rate:>14,.0f}{raw['pkcs11']:>26,.0f}")
    print(f"pkcs11 / file: {hsm_rate / file_rate:.2f} of the activations per second")
    print(f"{time.monotonic() - begun:.0f} s in all")
    return 0


def _config(hsm: dict[str, str]) -> dict:
    return {
        "module": hsm["SVC_PKCS11_MODULE"],
        "token_label": TOKEN,
        "key_label": KEY,
        "pin_file": hsm["SVC_PKCS11_PIN_FILE"],
        "timeout": 5.0,
        "sessions": 1,
    }


if __name__ == "__main__":
    sys.exit(main())
