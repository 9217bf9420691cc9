"""Every failure of the device module is a coded LicenseError (issue 21): for any file
content, any answer bytes and any argument. Nesting and size are bounded before JSON is
parsed, signed or not (devices.jsonsafe)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devices
from devices import LicenseError, SyncRequired, client, documents, jsonsafe, keys
from devices.state import MAX_STATE_BYTES, read_json
from devices.token import MAX_TOKEN_CHARS, b64url_encode, verify_token
from tests.devices.device_support import DEVICE, claims_for

DEEP = "[" * 100_000 + "]" * 100_000
# Deep enough to raise RecursionError in json.loads, small enough to fit in a token.
DEEP_IN_A_TOKEN = "[" * 2_500 + "]" * 2_500
# A fixed key for the property tests (hypothesis wants no function-scoped fixture).
HYPOTHESIS_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def signed(prefix: str, payload: str | bytes, key) -> str:
    """A document whose payload is exactly ``payload`` (text is UTF-8 encoded, bytes are
    taken as they are), validly signed by ``key``."""
    raw = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    signing_input = f"{prefix}.{b64url_encode(raw)}"
    return f"{signing_input}.{b64url_encode(key.sign(signing_input.encode('ascii')))}"


def depth(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests (a scalar: 0)."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


# Payloads a signer could have put into a document: each must be refused, coded.
HOSTILE_PAYLOADS = {
    "deep": '{"typ": "x", "deep": ' + DEEP_IN_A_TOKEN + "}",
    "unclosed": '{"typ": "x", "deep": ' + "[" * 5_000,
    "not UTF-8": b'{"typ": "' + bytes([0xFF, 0xFE]) + b'"}',
    "NaN": '{"typ": "x", "iat": NaN}',
    "Infinity": '{"typ": "x", "iat": -Infinity}',
    "a list": "[1, 2, 3]",
    "a string": '"SVC"',
    "null": "null",
    "duplicate key": '{"typ": "x", "typ": "y"}',
    "digits past the int limit": '{"iat": ' + "9" * 5_000 + "}",
    "a BOM": "\ufeff{}",
    "empty": "",
}


# -- the bounded parser ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        DEEP,
        "[" * 100_000,
        "{" * 40 + "}" * 40,
        '{"a": ' * 33 + "1" + "}" * 33,
        b"\xff\xfe",
        "NaN",
        "[Infinity]",
        "x" * 2000,
        b"",
        "[1,",
        '["unterminated',
        "]" * 500 + "[" * 500,
        7,
        None,
    ],
)
def test_jsonsafe_refuses_with_a_value_error(data):
    with pytest.raises(jsonsafe.JSONRefused):
        jsonsafe.loads(data, max_bytes=1000)


def test_jsonsafe_counts_brackets_outside_strings_only():
    text = json.dumps({"a": "[" * 40 + '"' + "{" * 9, "b": [[1]]})  # an escaped quote too
    assert jsonsafe.loads(text, max_bytes=1000, max_depth=3)["b"] == [[1]]
    tricky = r'["\\", "[", "\\\"[", "\\\\\\"]'  # backslash runs ending a string or a quote
    assert jsonsafe.loads(tricky, max_bytes=1000, max_depth=1) == json.loads(tricky)


def test_jsonsafe_nesting_limit_is_exact():
    for levels in (1, 2, 31, 32):
        for text in ("[" * levels + "]" * levels, '{"k": ' * levels + "1" + "}" * levels):
            assert jsonsafe.loads(text, max_bytes=1000, max_depth=levels) == json.loads(text)
            with pytest.raises(jsonsafe.JSONRefused, match="nested deeper"):
                jsonsafe.loads(text, max_bytes=1000, max_depth=levels - 1)


def test_jsonsafe_size_bound_is_in_bytes_and_names_what():
    with pytest.raises(jsonsafe.JSONRefused, match="licence status is 1001 bytes"):
        jsonsafe.loads(b" " * 1001, max_bytes=1000, what="licence status")
    with pytest.raises(jsonsafe.JSONRefused, match="1500 bytes"):
        jsonsafe.loads('"' + "é" * 749 + '"', max_bytes=1000)  # 751 characters, 1500 bytes


@pytest.mark.parametrize(
    "data",
    [
        # A string opened and never closed: the scan before this one was quadratic (128 KiB
        # of these took it 30 s; this 1 MiB, half an hour), so a regression fails rather
        # than hangs.
        b'"' + b'\\"' * (1 << 19),
        b"\\" * (2 << 20),
        b'"' * (2 << 20),
        b'"[' * (1 << 20),
        b"[" + b"[1]," * ((1 << 19) - 1) + b"[1]]",
        b"[" * 32 + b"[]" * (1 << 20) + b"]" * 32,
    ],
    ids=["escaped quotes", "backslashes", "quotes", "quoted brackets", "lists", "wide deep"],
)
def test_jsonsafe_time_is_linear_in_the_worst_inputs(data):
    started = time.perf_counter()
    try:
        jsonsafe.loads(data, max_bytes=len(data))
    except jsonsafe.JSONRefused:
        pass
    # Linear, each takes under 1 s (lists, the slowest, 0.5 s); quadratic, each is past half an
    # hour. The bound sits between, far from both, so a loaded machine does not fail it.
    assert time.perf_counter() - started < 30.0


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('[]{}"\\ab\u00e9\u2028\U0001f600\x00'), max_size=12)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), inner, max_size=4)
    ),
    max_leaves=40,
)


@FUZZ
@given(JSON_VALUES, st.booleans(), st.booleans())
def test_jsonsafe_reads_any_json_exactly_to_its_depth(value, ensure_ascii, as_bytes):
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    data = text.encode() if as_bytes else text
    levels = depth(value)
    assert jsonsafe.loads(data, max_bytes=len(text) * 4, max_depth=levels) == value
    if levels:
        with pytest.raises(jsonsafe.JSONRefused, match="nested deeper"):
            jsonsafe.loads(data, max_bytes=len(text) * 4, max_depth=levels - 1)


@FUZZ
@given(st.text(alphabet='[]{}"\\:,1 ae\u00e9', max_size=200) | st.binary(max_size=200))
def test_jsonsafe_returns_what_json_loads_does_or_refuses(data):
    try:
        value = jsonsafe.loads(data, max_bytes=1000, max_depth=4)
    except jsonsafe.JSONRefused:
        return
    assert value == json.loads(data)
    assert depth(value) <= 4


# -- signed or not, a hostile payload is a coded refusal -------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_PAYLOADS))
def test_hostile_token_payloads_signed_or_not_are_bad_signature(signing_key, public_key, name):
    payload = HOSTILE_PAYLOADS[name]
    ring = keys.Keyring(pinned=public_key)
    rooted = keys.Keyring([Ed25519PrivateKey.generate().public_key()])
    forged = signed("SVC1", payload, signing_key).rsplit(".", 1)[0] + "." + "A" * 86
    for token in (signed("SVC1", payload, signing_key), forged):
        assert len(token) <= MAX_TOKEN_CHARS  # refused for its content, not its size
        for key in (public_key, ring, rooted):  # a keyring reads the kid before verifying
            with pytest.raises(devices.BadSignature) as caught:
                verify_token(token, key)
            assert caught.value.code in ("BAD_SIGNATURE", "KEY_UNKNOWN")
    with pytest.raises(devices.BadSignature):
        devices.token.decode_unverified(signed("SVC1", payload, signing_key))


def test_deep_token_payload_signed_or_not_is_bad_signature(signing_key, public_key):
    unsigned = "SVC1." + b64url_encode(DEEP.encode()) + ".AA"
    for token in (signed("SVC1", DEEP, signing_key), unsigned):
        with pytest.raises(devices.BadSignature):
            verify_token(token, public_key)


PARSERS = {
    documents.STATUS_PREFIX: documents.parse_status,
    documents.RECEIPT_PREFIX: documents.parse_receipt,
    documents.LIST_PREFIX: documents.parse_revocation_page,
}


@pytest.mark.parametrize("prefix", sorted(PARSERS))
@pytest.mark.parametrize("name", sorted(HOSTILE_PAYLOADS))
def test_hostile_signed_documents_are_bad_signature(signing_key, prefix, name):
    text = signed(prefix, HOSTILE_PAYLOADS[name], signing_key)
    for key in (signing_key.public_key(), keys.Keyring(pinned=signing_key.public_key())):
        with pytest.raises(devices.BadSignature) as caught:
            PARSERS[prefix](text, key)
        assert caught.value.code == "BAD_SIGNATURE"


@pytest.mark.parametrize("prefix", sorted(PARSERS))
def test_deep_and_huge_documents_are_refused_before_they_are_parsed(signing_key, prefix):
    deep = '{"typ": "x", "deep": ' + DEEP + "}"
    huge = '{"typ": "x", "pad": "' + "x" * documents.MAX_DOCUMENT_CHARS + '"}'
    for text in (signed(prefix, deep, signing_key), signed(prefix, huge, signing_key)):
        with pytest.raises(devices.BadSignature):
            PARSERS[prefix](text, signing_key.public_key())
    assert keys.unverified_payload(signed(prefix, huge, signing_key)) == {}


@pytest.mark.parametrize("prefix", sorted(PARSERS))
def test_a_signed_document_of_the_wrong_shape_is_bad_response(signing_key, prefix):
    text = signed(prefix, '{"typ": "x", "deep": [[[[[[]]]]]]}', signing_key)
    with pytest.raises(LicenseError) as caught:
        PARSERS[prefix](text, signing_key.public_key())
    assert caught.value.code == "BAD_RESPONSE"


@pytest.mark.parametrize("name", sorted(HOSTILE_PAYLOADS))
def test_hostile_key_certificates_are_not_trusted(signing_key, name):
    root = signing_key
    roots = {keys.key_id(root.public_key()): root.public_key()}
    text = signed(keys.CERT_PREFIX, HOSTILE_PAYLOADS[name], root)
    with pytest.raises(keys.KeyNotTrusted) as caught:
        keys.parse_certificate(text, roots)
    assert caught.value.code == "KEY_UNTRUSTED_ROOT"  # nothing readable names the root
    assert "root" not in keys.unverified_payload(text)
    assert keys.Keyring([root.public_key()]).add_valid([text]) == 0


def test_a_root_signed_certificate_holding_a_deep_value_is_not_trusted(signing_key):
    root = signing_key
    roots = {keys.key_id(root.public_key()): root.public_key()}
    root_kid = keys.key_id(root.public_key())
    for payload in (
        '{"root": "' + root_kid + '", "deep": ' + DEEP + "}",
        '{"root": "' + root_kid + '", "iat": NaN}',
        '{"root": "' + root_kid + '", "key": "-----BEGIN PUBLIC KEY-----\\nAAAA"}',
    ):
        text = signed(keys.CERT_PREFIX, payload, root)
        with pytest.raises(keys.KeyNotTrusted) as caught:
            keys.parse_certificate(text, roots)
        assert caught.value.code in ("KEY_CERT_INVALID", "KEY_UNTRUSTED_ROOT")


def test_deep_key_certificate_is_not_trusted(signing_key):
    root = signing_key
    text = signed(keys.CERT_PREFIX, '{"root": "x", "deep": ' + DEEP + "}", root)
    with pytest.raises(keys.KeyNotTrusted):
        keys.parse_certificate(text, {keys.key_id(root.public_key()): root.public_key()})
    assert keys.unverified_payload(text) == {}
    ring = keys.Keyring([root.public_key()])
    assert ring.add_valid([text, DEEP, None, 7, b"SVCK1.e30.AA", ["x"], {"a": 1}]) == 0
    assert ring.add_valid(DEEP) == ring.add_valid(None) == 0


@pytest.mark.parametrize("text", [b"SVCK1.e30.AA", bytearray(b"a.b.c"), 7, None, ["a.b"], "a.b"])
def test_unverified_payload_of_anything_but_a_document_is_empty(text):
    assert keys.unverified_payload(text) == {}
    with pytest.raises(keys.KeyNotTrusted):
        keys.parse_certificate(text, {})


def test_a_pem_key_of_an_unsupported_kind_is_unusable_not_a_crash(make_token):
    der = bytearray(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    prime256v1 = bytes.fromhex("2a8648ce3d030107")  # the curve's OID, 1.2.840.10045.3.1.7
    der[der.index(prime256v1) + 7] = 0x7F  # 1.2.840.10045.3.1.127: no such curve
    pem = (
        "-----BEGIN PUBLIC KEY-----\n"
        + base64.b64encode(der).decode()
        + "\n-----END PUBLIC KEY-----\n"
    )
    with pytest.raises(devices.BadSignature, match="unusable public key"):
        verify_token(make_token(), pem)


@pytest.mark.parametrize(
    "name", ["state.json", "spool.json", "status.json", "keys.json", "usage.journal"]
)
@pytest.mark.parametrize(
    "content", [DEEP.encode(), b"\xff" * 100, b"[]", b"null", b'{"receipt": [[[[]]]]}']
)
def test_hostile_state_files_never_raise_a_raw_exception(
    make_engine, make_token, state_dir, name, content
):
    (state_dir / name).write_bytes(content)
    try:
        engine = make_engine()
        engine.start(make_token())
    except LicenseError as exc:
        assert exc.code  # coded: SyncRequired, STATE_*, ...
        return
    engine.count(inferences=1)


def test_a_deep_receipt_in_the_state_file_sets_it_aside(make_engine, make_token, state_dir):
    receipt = signed(documents.RECEIPT_PREFIX, DEEP, Ed25519PrivateKey.generate())
    (state_dir / "state.json").write_text(json.dumps({"hwm": 0, "receipt": receipt}))
    with pytest.raises(SyncRequired):
        make_engine().start(make_token())
    assert (state_dir / "state.json.damaged").exists()


def test_non_ascii_and_oversized_license_files_are_coded(make_engine, state_dir):
    for content in ("SVC1.é.x".encode(), b"\x00" * 100, b"A" * (1 << 20)):
        (state_dir / "license.token").write_bytes(content)
        with pytest.raises(devices.BadSignature):
            make_engine().start()


@pytest.mark.parametrize(
    "content",
    [
        DEEP.encode(),
        b"[" * 100_000,
        b'{"hwm": ' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"hwm": "\xff\xfe"}',
        b"\xef\xbb\xbf{}",  # a byte-order mark
        b'{"hwm": NaN}',
        b'{"hwm": Infinity}',
        b'{"hwm": ' + b"9" * 5_000 + b"}",
        b"",
        b"{",
    ],
)
def test_hostile_state_files_are_state_corrupt(tmp_path, content):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(LicenseError) as caught:
        read_json(path)
    assert caught.value.code == "STATE_CORRUPT"
    assert str(path) in str(caught.value)


def test_a_state_file_past_its_size_bound_is_state_corrupt(tmp_path):
    path = tmp_path / "spool.json"
    path.write_bytes(b"{" + b" " * MAX_STATE_BYTES + b"}")
    with pytest.raises(LicenseError, match="at most") as caught:
        read_json(path)
    assert caught.value.code == "STATE_CORRUPT"


def test_an_unreadable_state_file_is_state_unreadable(tmp_path):
    (tmp_path / "state.json").mkdir()
    with pytest.raises(LicenseError) as caught:
        read_json(tmp_path / "state.json")
    assert caught.value.code == "STATE_UNREADABLE"
    assert read_json(tmp_path / "absent.json", default={}) == {}


# -- answers on the network ------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [DEEP, "[1, 2]", "null", "\udcff", "{" * 50, "NaN", '{"status": ' + "[" * 3000 + "}"],
)
def test_hostile_answers_are_coded(make_engine, make_token, service, state_dir, body):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=1)
    for route in (("GET", "/v1/revocations/status"), ("POST", "/v1/usage")):
        service.on(*route, lambda request: (200, json.loads(json.dumps(body))))
    service.on("GET", "/v1/license", lambda request: (200, body))
    with pytest.raises(LicenseError) as caught:
        engine.sync(service.url, allow_http=True)
    assert caught.value.code
    engine.require("detect")  # nothing learned, nothing lost


def test_activation_answers_and_arguments_are_coded(service, tmp_path, make_token):
    for answer in ({"unit_token": "SVC1.é.x"}, {"unit_token": 5}, {"unit_token": DEEP}):
        service.reply("POST", "/v1/activate", 200, answer)
        with pytest.raises(LicenseError) as caught:
            devices.activate(service.url, "B", tmp_path / "a", device_id=DEVICE, allow_http=True)
        assert caught.value.code == "BAD_RESPONSE"
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token()})
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LicenseError) as caught:
        devices.activate(service.url, "B", blocker / "state", device_id=DEVICE, allow_http=True)
    assert caught.value.code == "STATE_UNREADABLE"
    for call, code in [
        (lambda: devices.activate(None, "B", tmp_path), "BAD_URL"),
        (lambda: devices.activate(service.url, None, tmp_path, allow_http=True), "BAD_ARGUMENT"),
        (lambda: devices.activate(service.url, "B", 5, allow_http=True), "BAD_ARGUMENT"),
        (lambda: devices.activate(service.url, "B", tmp_path, device_id=3), "BAD_ARGUMENT"),
    ]:
        with pytest.raises(LicenseError) as caught:
            call()
        assert caught.value.code == code


# -- answers on the network, byte for byte ---------------------------------------------


class RawService:
    """A stand-in for the service that answers every request with the same raw bytes,
    status line and headers included (FakeService answers with JSON it encodes)."""

    def __init__(self) -> None:
        self.answer = b""
        self.url = ""


@contextmanager
def serving(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """A local HTTP server whose every GET and POST ``answer`` handles; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            answer(self)

        do_GET = do_POST = _handle  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def raw_service() -> Iterator[RawService]:
    raw = RawService()

    def answer(request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        if length:
            request.rfile.read(length)
        request.wfile.write(raw.answer)
        request.close_connection = True

    with serving(answer) as url:
        raw.url = url
        yield raw


def http(status: int, body: bytes, *headers: bytes) -> bytes:
    lines = [b"HTTP/1.1 %d X" % status, *headers, b"Content-Length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


GZIP = b"Content-Encoding: gzip"
# Answer -> what client.call makes of it: a status with an empty payload, or an error code.
RAW_ANSWERS = {
    "deep": (http(200, DEEP.encode()), 200),
    "deep, never closed": (http(200, b"[" * 100_000), 200),
    "deep on an error": (http(500, b"[" * 100_000), 500),
    "deep in an object": (http(200, b'{"status": ' + b"[" * 3_000 + b"}"), 200),
    "escaped quotes": (http(200, b'"' + b'\\"' * 20_000), 200),
    "not UTF-8": (http(200, b'{"unit_token": "\xff\xfe"}'), 200),
    "NaN": (http(200, b'{"seq": NaN}'), 200),
    "a list": (http(200, b'[{"unit_token": "x"}]'), 200),
    "null": (http(200, b"null"), 200),
    "not JSON": (http(200, b"<html>proxy error</html>"), 200),
    "too large": (http(200, b" " * (client.MAX_RESPONSE_BYTES + 1)), "BAD_RESPONSE"),
    "gzip bomb": (http(200, gzip.compress(b"[" * (4 << 20)), GZIP), "BAD_RESPONSE"),
    "not gzip": (http(500, b"plain", GZIP), "BAD_RESPONSE"),
    "truncated gzip": (http(200, gzip.compress(b'{"a": 1}')[:12], GZIP), 200),
    "Content-Length lie": (b"HTTP/1.1 500 X\r\nContent-Length: 900\r\n\r\n{}", 500),
    "bad chunks": (b"HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "NETWORK_ERROR"),
    "bad chunks on an error": (
        b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "NETWORK_ERROR",
    ),
    "redirect to a malformed address": (http(302, b"", b"Location: http://[/"), "REDIRECT_REFUSED"),
    "redirect to plain http": (
        http(301, b"{}", b"Location: http://evil.example/v1/usage"),
        "REDIRECT_REFUSED",
    ),
    "temporary redirect": (http(307, b"", b"Location: /elsewhere"), "REDIRECT_REFUSED"),
    "not HTTP": (b"220 mail.example ESMTP\r\n", "NETWORK_ERROR"),
    "nothing": (b"", "NETWORK_ERROR"),
    "a status of 99": (http(99, b"{}"), "NETWORK_ERROR"),
    "101 headers": (b"HTTP/1.1 200 X\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n{}", "NETWORK_ERROR"),
    "non-ASCII header": (http(200, b"{}", b"ETag: \xff\xfe"), 200),
}


@pytest.mark.parametrize("name", sorted(RAW_ANSWERS))
def test_any_answer_is_a_status_with_an_object_or_a_coded_error(raw_service, name):
    raw_service.answer, expected = RAW_ANSWERS[name]
    url = client.endpoint(raw_service.url, "/v1/usage", allow_http=True)
    if isinstance(expected, int):
        status, payload, _ = client.call("POST", url, body={"records": []}, timeout=5)
        assert (status, payload) == (expected, {})
    else:
        with pytest.raises(LicenseError) as caught:
            client.call("POST", url, body={"records": []}, timeout=5)
        assert caught.value.code == expected


@pytest.mark.parametrize("name", sorted(RAW_ANSWERS))
def test_a_sync_through_any_answer_is_coded_and_loses_nothing(
    make_engine, make_token, raw_service, name
):
    engine = make_engine()
    engine.start(make_token())
    engine.count(inferences=1)
    raw_service.answer = RAW_ANSWERS[name][0]
    with pytest.raises(LicenseError) as caught:
        engine.sync(raw_service.url, allow_http=True, timeout=5)
    assert caught.value.code
    engine.require("detect")  # nothing learned, nothing lost
    engine.count(inferences=1)


@pytest.mark.parametrize("name", sorted(RAW_ANSWERS))
def test_an_activation_through_any_answer_is_coded(raw_service, tmp_path, name):
    raw_service.answer = RAW_ANSWERS[name][0]
    with pytest.raises(LicenseError) as caught:
        devices.activate(raw_service.url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    assert caught.value.code in (
        "BAD_RESPONSE",
        "NETWORK_ERROR",
        "ACTIVATION_FAILED",
        "REDIRECT_REFUSED",
    )
    assert not (tmp_path / "license.token").exists()


def test_a_redirect_takes_no_credential_anywhere(make_engine, make_token, raw_service):
    """A proxy answering 307 to its own host gets neither the usage nor the token."""
    seen: list[str] = []

    def answer(request: BaseHTTPRequestHandler) -> None:
        seen.append(request.headers.get("Authorization") or "no credential")
        request.send_response(200)
        request.end_headers()

    with serving(answer) as elsewhere:
        target = elsewhere.encode() + b"/v1/usage"
        raw_service.answer = http(307, b"", b"Location: " + target)
        engine = make_engine()
        engine.start(make_token())
        engine.count(inferences=3)
        with pytest.raises(LicenseError) as caught:
            engine.sync(raw_service.url, allow_http=True, timeout=5)
        assert caught.value.code == "REDIRECT_REFUSED"
        assert "redirect" in str(caught.value)
        assert seen == []
        engine.count(inferences=1)  # the spool is kept


@pytest.mark.parametrize(
    "url",
    [
        "http://",
        "http://[",
        "http://exa mple.com",
        "http://host/\n",
        "http://host:99999",
        "https://" + "a" * 64 + ".example",
        "https://a..example",
        "https://h\udcff.example",
        "https://host.example/caf\u00e9",
        "ftp://host.example",
        "",
    ],
)
def test_an_unusable_service_address_is_bad_url(tmp_path, url):
    with pytest.raises(LicenseError) as caught:
        devices.activate(url, "B", tmp_path, device_id=DEVICE, allow_http=True)
    assert caught.value.code == "BAD_URL"


@pytest.mark.parametrize(
    "url", ["https://m\u00fcnchen.example", "https://[::1]:8443/api/", "http://127.0.0.1:8000"]
)
def test_usable_service_addresses_pass(url):
    assert client.endpoint(url, "/v1/activate", allow_http=True).endswith("/v1/activate")


@pytest.mark.parametrize("timeout", ["10", 0, -1, float("nan"), float("inf"), None, True])
def test_an_activation_timeout_that_is_not_seconds_is_bad_argument(tmp_path, timeout):
    with pytest.raises(devices.InvalidArgument):
        devices.activate("https://h.example", "B", tmp_path, device_id=DEVICE, timeout=timeout)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_activation_into_a_read_only_directory_is_state_unreadable(service, tmp_path, make_token):
    service.reply("POST", "/v1/activate", 200, {"unit_token": make_token()})
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(LicenseError, match="Permission denied") as caught:
            devices.activate(
                service.url, "B", tmp_path / "state", device_id=DEVICE, allow_http=True
            )
    finally:
        tmp_path.chmod(0o700)
    assert caught.value.code == "STATE_UNREADABLE"
    assert str(tmp_path / "state") in str(caught.value)


# -- properties: any input, a coded LicenseError or a value ----------------------------

TEXTS = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["SVC1.", "SVCS1.e30.AA", "SVCR1..", DEEP[:4000], "SVCU1.W10.AA"]),
    st.builds(
        lambda prefix, payload: f"{prefix}.{b64url_encode(payload)}.{b64url_encode(b'x' * 64)}",
        st.sampled_from(["SVC1", "SVCS1", "SVCU1", "SVCR1", "SVCK1"]),
        st.binary(max_size=200) | st.just(DEEP.encode()),
    ),
    st.binary(max_size=100),
    JSON_VALUES.map(json.dumps),
    st.integers(),
    st.none(),
)


@FUZZ
@given(TEXTS)
def test_every_parser_answers_any_input_with_a_coded_error(signing_key, text):
    public = signing_key.public_key()
    ring = keys.Keyring([public])
    for parse in (
        lambda: verify_token(text, public),
        lambda: verify_token(text, ring),
        lambda: documents.verify_document("SVCS1", text, public),
        lambda: documents.parse_status(text, public),
        lambda: documents.parse_receipt(text, ring),
        lambda: documents.parse_revocation_page(text, public),
        lambda: keys.parse_certificate(text, {"x": public}),
    ):
        try:
            parse()
        except LicenseError as exc:
            assert exc.code
    assert isinstance(keys.unverified_payload(text), dict)


@FUZZ
@given(st.binary(max_size=500) | st.just(DEEP.encode()))
def test_read_json_answers_any_bytes_with_a_value_or_state_corrupt(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("f") / "state.json"
    path.write_bytes(data)
    try:
        read_json(path)
    except LicenseError as exc:
        assert exc.code == "STATE_CORRUPT"


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(sorted(claims_for())),
        st.none() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2),
        max_size=6,
    )
)
def test_any_signed_claims_verify_or_are_refused_coded(signing_key, public_key, changes):
    claims = {**claims_for(), **changes}
    token = signed("SVC1", json.dumps(claims), signing_key)
    try:
        verified = verify_token(token, public_key)
    except LicenseError as exc:
        assert exc.code == "BAD_SIGNATURE"
    else:
        assert verified["lic"] == claims["lic"]


# Fields of every signed document, each given any JSON value: the shape checks after the
# signature see every wrong type.
DOCUMENT_FIELDS = sorted(
    {"typ", "iss", "kid", "lic", "dev", "nonce", "iat", "nbf", "exp", "use", "key", "root"}
    | {"from", "seq", "more", "revoked", "revoked_at", "keys_revoked", "records", "inferences"}
)
DOCUMENT_TYPES = [documents.LIST_TYPE, documents.RECEIPT_TYPE, documents.STATUS_TYPE]
PAYLOADS = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(sorted(HOSTILE_PAYLOADS.values(), key=repr)),
    JSON_VALUES.map(json.dumps),
    st.fixed_dictionaries(
        {"typ": st.sampled_from([*DOCUMENT_TYPES, keys.CERT_TYPE]) | JSON_VALUES},
        optional=dict.fromkeys(set(DOCUMENT_FIELDS) - {"typ"}, JSON_VALUES),
    ).map(json.dumps),
)


@FUZZ
@given(st.sampled_from(["SVC1", *sorted(PARSERS), keys.CERT_PREFIX]), PAYLOADS)
def test_every_parser_answers_any_validly_signed_payload_with_a_coded_error(prefix, payload):
    """The signature verifies, so each parser reaches the payload's JSON and its shape."""
    text = signed(prefix, payload, HYPOTHESIS_KEY)
    public = HYPOTHESIS_KEY.public_key()
    roots = {keys.key_id(public): public}
    for key in (public, keys.Keyring(pinned=public), keys.Keyring([public])):
        for parse, argument in (
            (verify_token, key),
            (partial(documents.verify_document, prefix), key),
            (documents.parse_status, key),
            (documents.parse_receipt, key),
            (documents.parse_revocation_page, key),
            (keys.parse_certificate, roots),
        ):
            try:
                parse(text, argument)
            except LicenseError as exc:
                assert exc.code
    assert keys.Keyring([public]).add_valid([text]) in (0, 1)
    assert isinstance(keys.unverified_payload(text), dict)
