"""Every failure of the device module is a coded LicenseError (issue 21): for any file
content, any answer bytes and any argument. Nesting and size are bounded before JSON is
parsed, signed or not (devices.jsonsafe)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devices
from devices import LicenseError, SyncRequired, documents, jsonsafe, keys
from devices.state import read_json
from devices.token import b64url_encode, verify_token
from tests.devices.device_support import DEVICE, claims_for

DEEP = "[" * 100_000 + "]" * 100_000
FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def signed(prefix: str, payload_text: str, key) -> str:
    """A document whose payload is exactly ``payload_text``, validly signed by ``key``."""
    signing_input = f"{prefix}.{b64url_encode(payload_text.encode())}"
    return f"{signing_input}.{b64url_encode(key.sign(signing_input.encode('ascii')))}"


# -- the bounded parser ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [DEEP, "{" * 40 + "}" * 40, b"\xff\xfe", "NaN", "[Infinity]", "x" * 2000, b"", "[1,"],
)
def test_jsonsafe_refuses_with_a_value_error(data):
    with pytest.raises(jsonsafe.JSONRefused):
        jsonsafe.loads(data, max_bytes=1000)


def test_jsonsafe_counts_brackets_outside_strings_only():
    text = json.dumps({"a": "[" * 40 + '"' + "{" * 9, "b": [[1]]})  # an escaped quote too
    assert jsonsafe.loads(text, max_bytes=1000, max_depth=3)["b"] == [[1]]


# -- signed or not, a deep document is a coded refusal ---------------------------------


def test_deep_token_payload_signed_or_not_is_bad_signature(signing_key, public_key):
    unsigned = "SVC1." + b64url_encode(DEEP.encode()) + ".AA"
    for token in (signed("SVC1", DEEP, signing_key), unsigned):
        with pytest.raises(devices.BadSignature):
            verify_token(token, public_key)


@pytest.mark.parametrize(
    ("prefix", "parse"),
    [
        (documents.STATUS_PREFIX, documents.parse_status),
        (documents.RECEIPT_PREFIX, documents.parse_receipt),
        (documents.LIST_PREFIX, documents.parse_revocation_page),
    ],
)
def test_deep_signed_documents_are_coded_refusals(signing_key, prefix, parse):
    nested = '{"typ": "x", "deep": ' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(LicenseError):
        parse(signed(prefix, nested, signing_key), signing_key.public_key())


def test_deep_key_certificate_is_not_trusted(signing_key):
    root = signing_key
    text = signed(keys.CERT_PREFIX, '{"root": "x", "deep": ' + DEEP + "}", root)
    with pytest.raises(keys.KeyNotTrusted):
        keys.parse_certificate(text, {keys.key_id(root.public_key()): root.public_key()})
    assert keys.unverified_payload(text) == {}
    ring = keys.Keyring([root.public_key()])
    assert ring.add_valid([text, DEEP, None, 7]) == 0


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
    receipt = signed(documents.RECEIPT_PREFIX, DEEP, devices.token.Ed25519PrivateKey.generate())
    (state_dir / "state.json").write_text(json.dumps({"hwm": 0, "receipt": receipt}))
    with pytest.raises(SyncRequired):
        make_engine().start(make_token())
    assert (state_dir / "state.json.damaged").exists()


def test_non_ascii_and_oversized_license_files_are_coded(make_engine, state_dir):
    for content in ("SVC1.é.x".encode(), b"\x00" * 100, b"A" * (1 << 20)):
        (state_dir / "license.token").write_bytes(content)
        with pytest.raises(devices.BadSignature):
            make_engine().start()


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


# -- properties: any input, a coded LicenseError or a value ----------------------------

TEXTS = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["SVC1.", "SVCS1.e30.AA", "SVCR1..", DEEP[:4000], "SVCU1.W10.AA"]),
    st.builds(
        lambda prefix, payload: f"{prefix}.{b64url_encode(payload)}.{b64url_encode(b'x' * 64)}",
        st.sampled_from(["SVC1", "SVCS1", "SVCU1", "SVCR1", "SVCK1"]),
        st.binary(max_size=200) | st.just(DEEP.encode()),
    ),
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
