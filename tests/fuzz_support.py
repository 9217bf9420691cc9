"""What tests/test_device_fuzz.py does to a camera: a byte-level proxy that rewrites
requests and answers, and the mutations of one file of a state directory.

Device-side only (no Django): the proxy forwards to any service, the mutations touch any
state directory. Every mutation is drawn from a kind and a seed, so a failing example is
reproduced by its arguments alone.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEEP = b"[" * 50_000 + b"]" * 50_000
COUNTERS = ("inferences", "frames", "stream_seconds", "events")
UPLOAD = "/v1/usage"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the proxy: any request body of an upload, any status, header or byte of any answer ---

Answer = tuple[int, dict[str, str], bytes]


class ByteProxy:
    """Forwards to the service. ``rewrite(body, earlier)`` may send other bytes for a
    usage upload (``earlier``: the genuine upload bodies that went before, to replay);
    ``mutate(path, status, headers, body, earlier)`` may answer other bytes
    (``earlier``: the genuine answers this path gave before, oldest first, to replay)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.rewrite: Callable[[bytes, list[bytes]], bytes] | None = None
        self.mutate: Callable[..., Answer] | None = None
        self.genuine: dict[str, list[Answer]] = {}
        self.uploads: list[bytes] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                path = self.path.split("?")[0]
                if path == UPLOAD and data is not None:
                    sent = proxy.rewrite(data, proxy.uploads) if proxy.rewrite else data
                    proxy.uploads = _kept(proxy.uploads, data)
                    data = sent
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "authorization", "if-none-match")
                }
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=data, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, body, got = answer.status, answer.read(), dict(answer.headers)
                except urllib.error.HTTPError as exc:
                    status, body, got = exc.code, exc.read(), dict(exc.headers)
                sent_headers = {"Content-Type": got.get("Content-Type", "application/json")}
                genuine = (status, dict(sent_headers), body)
                earlier = proxy.genuine.setdefault(path, [])
                if proxy.mutate is not None:
                    status, sent_headers, body = proxy.mutate(
                        path, status, sent_headers, body, list(earlier) or [genuine]
                    )
                earlier[:] = _kept(earlier, genuine)
                self.send_response(status)
                length = sent_headers.pop("Content-Length", None)
                for name, value in sent_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _kept(history: list, item: Any) -> list:
    """``history`` with ``item``: the first answers (the setup's, before any verdict
    changed) and the latest ones, a bounded pool to replay from."""
    return [*history[:16], *history[16:][-47:], item]


def request_rewrite(kind: str, seed: int) -> Callable[[bytes, list[bytes]], bytes] | None:
    """What a proxy does to a usage upload's body: counts zeroed or inflated (all records
    or one), an earlier upload replayed whole or under this upload's nonce, records
    reordered, dropped or doubled with other counts."""
    if kind == "none":
        return None
    rng = random.Random(seed)

    def rewrite(data: bytes, earlier: list[bytes]) -> bytes:
        try:
            body = json.loads(data)
            records = body["records"]
        except (ValueError, KeyError, TypeError):
            return data
        if kind == "replay":  # an earlier upload, byte for byte (its own nonce)
            return rng.choice(earlier) if earlier else data
        if kind == "replay records":  # earlier records under this upload's nonce
            if earlier:
                try:
                    body["records"] = json.loads(rng.choice(earlier))["records"]
                except (ValueError, KeyError, TypeError):
                    pass
            return json.dumps(body).encode()
        if kind == "reorder":
            rng.shuffle(records)
        elif kind == "drop" and records:
            del records[rng.randrange(len(records))]
        elif kind in ("zero", "zero one", "inflate", "inflate one") and records:
            chosen = [rng.choice(records)] if kind.endswith("one") else records
            for record in chosen:
                for name in COUNTERS:
                    if isinstance(record.get(name), int):
                        record[name] = 0 if kind.startswith("zero") else record[name] * 3 + 1
        elif kind == "double" and records:  # the same period again, other counts
            twin = dict(rng.choice(records))
            twin["inferences"] = 0
            records.insert(rng.randrange(len(records) + 1), twin)
        return json.dumps(body).encode()

    return rewrite


REQUEST_KINDS = [
    "none", "zero", "zero one", "inflate", "inflate one", "replay", "replay records",
    "reorder", "drop", "double",
]  # fmt: skip


def answer_mutation(kind: str, seed: int) -> Callable[..., Answer] | None:
    if kind == "none":
        return None
    rng = random.Random(seed)

    def mutate(path: str, status: int, headers: dict, body: bytes, earlier: list) -> Answer:
        if kind == "status":
            return rng.choice([200, 204, 304, 400, 401, 403, 404, 409, 500, 502]), headers, body
        if kind == "empty":
            return status, headers, b""
        if kind == "truncate":
            return status, headers, body[: rng.randrange(len(body) + 1)]
        if kind == "random bytes":
            return status, headers, rng.randbytes(rng.randrange(1, 400))
        if kind == "deep":
            return 200, headers, DEEP
        if kind == "list":
            return 200, headers, b"[1, 2, 3]"
        if kind == "gzip lie":
            return status, {**headers, "Content-Encoding": "gzip"}, body
        if kind == "short length":
            return status, {**headers, "Content-Length": str(max(len(body) - 7, 0))}, body
        if kind == "replay":  # an older genuine answer of this path: any camera's
            status, headers, body = rng.choice(earlier)
            return status, dict(headers), body
        # a field of the JSON answer nulled, emptied, zeroed or retyped
        try:
            value = json.loads(body)
        except ValueError:
            return status, headers, body
        if isinstance(value, dict) and value:
            name = rng.choice(sorted(value))
            value[name] = rng.choice([None, "", 0, [], {}, "x", 10**30, True])
        return status, headers, json.dumps(value).encode()

    return mutate


ANSWER_KINDS = [
    "none", "status", "empty", "truncate", "random bytes", "deep", "list", "gzip lie",
    "short length", "replay", "field",
]  # fmt: skip


# -- one-file mutations -----------------------------------------------------------------

FILES = [
    "license.token", "keys.json", "status.json", "state.json", "spool.json",
    "spool.rejected.json", "usage.journal",
]  # fmt: skip
FILE_KINDS = [
    "none", "delete", "truncate", "random bytes", "deep", "field", "other device",
    "older copy",
]  # fmt: skip
STATE_FIELDS = ["format", "hwm", "quota", "open", "restore", "receipt", "status"]


def _retyped(rng: random.Random) -> Any:
    return rng.choice([None, "", 0, -1, [], {}, "x", 2**80, [[[]]], True, 1.5])


def _mutate_json(data: bytes, rng: random.Random) -> bytes:
    try:
        value = json.loads(data)
    except ValueError:
        return data[: rng.randrange(len(data) + 1)]
    if isinstance(value, dict) and value:
        name = rng.choice(sorted(value))
        inner = value[name]
        if isinstance(inner, list) and inner and rng.random() < 0.5:
            inner.pop(rng.randrange(len(inner)))  # drop an item
        elif isinstance(inner, dict) and inner and rng.random() < 0.5:
            key = rng.choice(sorted(inner))
            inner[key] = _retyped(rng)
        else:
            value[name] = _retyped(rng)
    else:
        value = _retyped(rng)
    return json.dumps(value).encode()


def _state_field(data: bytes, name: str, rng: random.Random, older: Path, other: Path) -> bytes:
    """``state.json`` with its field ``name`` removed, retyped, or given a plausible
    value an owner would try: the clock mark moved, the quota zeroed, the open period
    emptied or moved, the receipt or status floors of an older copy or another device."""
    try:
        state = json.loads(data)
    except ValueError:
        return data
    if not isinstance(state, dict):
        return data

    def field_of(path: Path) -> Any:
        try:
            return json.loads((path / "state.json").read_bytes()).get(name)
        except (OSError, ValueError, AttributeError):
            return None

    value = state.get(name)
    choices: list[Any] = ["remove", _retyped(rng), field_of(older), field_of(other)]
    if name == "hwm" and isinstance(value, int):
        choices += [0, value - 3600, value - 301, value + 86400, value + 10**9]
    elif name == "quota" and isinstance(value, dict):
        choices += [{}, dict.fromkeys(value, 0), {k: v // 2 for k, v in value.items()}]
    elif name == "open" and isinstance(value, dict):
        zeroed = {**value, **dict.fromkeys(COUNTERS, 0)}
        moved = {**value, "period_start": value["period_start"] - 3600}
        moved["period_end"] = value["period_end"] - 3600
        choices += [None, zeroed, moved]
    elif name == "restore":
        choices += [True, False]
    elif name == "receipt" and isinstance(value, str):
        choices += ["", value[:-4] + "AAAA", value + "x"]
    elif name == "status" and isinstance(value, dict):
        choices += [{}, {k: [0, 0] for k in value}, {k: [10**6, 10**10] for k in value}]
    elif name == "format":
        choices += [2, 0]
    chosen = rng.choice(choices)
    if chosen == "remove":
        state.pop(name, None)
    else:
        state[name] = chosen
    return json.dumps(state).encode()


def _set_aside(data: bytes, rng: random.Random) -> bytes:
    """``spool.rejected.json`` with one conflict entry edited as an owner would: its
    counts lowered, its licence or reason changed, the counts held dropped, the entry
    removed or repeated, or a record for that period added that no engine wrote."""
    try:
        aside = json.loads(data)
        conflicts = aside["conflicts"]
        entry = rng.choice(conflicts)
        record = entry["record"]
    except (ValueError, KeyError, TypeError, IndexError):
        return data
    edit = rng.choice(["zero", "half", "lic", "why", "held", "remove", "repeat", "junk"])
    if edit == "zero":
        record.update(dict.fromkeys(COUNTERS, 0))
    elif edit == "half":
        record["inferences"] //= 2
    elif edit == "lic":
        entry["lic"] = rng.choice(["", "LIC-OTHER", entry["lic"].lower()])
    elif edit == "why":
        entry["why"] = rng.choice(["refused", "other", None])
    elif edit == "held":
        entry["held"] = rng.choice([None, {}, {**(entry.get("held") or {}), "inferences": 10**6}])
    elif edit == "remove":
        conflicts.remove(entry)
    elif edit == "repeat":
        conflicts.append({**entry, "record": {**record, "inferences": 0}})
    else:
        aside.setdefault("records", []).append({**record, "inferences": -1})
    return json.dumps(aside).encode()


def _spool(data: bytes, rng: random.Random, directory: Path) -> bytes:
    """``spool.json`` edited as an owner would: the open period (of ``state.json``)
    added as closed with no counts, or a record's counts lowered or dropped."""
    try:
        spool = json.loads(data) if data else {"format": 1, "records": []}
        records = spool["records"]
        opened = json.loads((directory / "state.json").read_bytes()).get("open")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return data
    edit = rng.choice(["open", "open", "zero", "drop"])
    if edit == "open" and isinstance(opened, dict):
        records.append({**opened, **dict.fromkeys(COUNTERS, 0)})
    elif edit == "zero" and records:
        rng.choice(records).update(dict.fromkeys(COUNTERS, 0))
    elif edit == "drop" and records:
        records.pop(rng.randrange(len(records)))
    return json.dumps(spool).encode()


def mutate_file(
    directory: Path,
    name: str,
    kind: str,
    seed: int,
    *,
    older: Path,
    other: Path,
    state_field: str,
) -> None:
    """Do ``kind`` to the file ``name`` of ``directory`` (``older``: the camera's copy
    an hour earlier; ``other``: another camera's directory)."""
    rng = random.Random(seed)
    path = directory / name
    data = path.read_bytes() if path.exists() else b""
    if kind == "delete":
        path.unlink(missing_ok=True)
    elif kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data) + 1)])
    elif kind == "random bytes":
        path.write_bytes(rng.randbytes(rng.randrange(1, 600)))
    elif kind == "deep":
        path.write_bytes(DEEP)
    elif kind == "field" and name == "state.json":
        path.write_bytes(_state_field(data, state_field, rng, older, other))
    elif kind == "field" and name == "spool.rejected.json" and rng.random() < 0.7:
        path.write_bytes(_set_aside(data, rng))
    elif kind == "field" and name == "spool.json" and rng.random() < 0.7:
        path.write_bytes(_spool(data, rng, directory))
    elif kind == "field" and name == "usage.journal":
        if data:
            lines = data.split(b"\n")
            index = rng.randrange(len(lines))
            lines[index] = _mutate_json(lines[index], rng)
            path.write_bytes(b"\n".join(lines))
    elif kind == "field":
        path.write_bytes(_mutate_json(data, rng))
    elif kind in ("other device", "older copy"):
        source = (other if kind == "other device" else older) / name
        if source.exists():
            shutil.copyfile(source, path)
        else:
            path.unlink(missing_ok=True)
