"""Air-gapped cameras (issue 44): answer the files a technician carries from a site with
no network, an activation request or a usage export, through the service (the seat, the
billing and the refusals are the service's, as for any activation or usage upload)."""

from __future__ import annotations

from pathlib import Path

from svcctl import EXIT_OK, OfflineError, files, output
from svcctl.commands.base import Command, connect

MAX_FILE_BYTES = 1 << 20


def _read(path: str, what: str) -> str:
    try:
        raw = Path(path).read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise OfflineError(f"cannot read the {what} {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise OfflineError(f"{path} is larger than {MAX_FILE_BYTES} bytes: not a {what}")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise OfflineError(f"{path} is not a {what}: not ASCII text") from None


def _answered(args, result: dict, fields: list[tuple[str, str]]) -> int:
    files.write_secret(args.out, result["answer"] + "\n", option="--out", force=args.force)
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.fields([*fields, ("answer file", f"{args.out} ({len(result['answer']) + 1} bytes)")])
    return EXIT_OK


def cmd_offline_activate(args) -> int:
    text = _read(args.file, "activation request")
    files.refuse_existing(args.out, "--out", force=args.force)  # before a seat is taken
    result = connect(args).post("offline/activations", {"request": text})
    return _answered(
        args,
        result,
        [
            ("licence", result["license_id"]),
            ("device", result["device_id"]),
            ("seat", "already on file (no seat taken)" if result["reactivated"] else "taken"),
            ("units left", "-" if result["batch_units_remaining"] is None
             else str(result["batch_units_remaining"])),
        ],
    )  # fmt: skip


def cmd_offline_usage(args) -> int:
    text = _read(args.file, "usage export")
    files.refuse_existing(args.out, "--out", force=args.force)
    result = connect(args).post("offline/usage", {"usage": text})
    return _answered(
        args,
        result,
        [
            ("licence", result["license_id"]),
            ("device", result["device_id"]),
            ("stored", str(result["accepted"])),
            ("duplicates", str(result["duplicates"])),
            ("conflicts", str(len(result["conflicts"]))),
            ("refused", str(len(result["refused"]))),
            ("revoked", "yes: nothing stored; the answer tells the camera" if result["revoked"]
             else "no"),
        ],
    )  # fmt: skip


def _file_arguments(what: str, answer: str):
    def add(parser) -> None:
        parser.add_argument("file", help=f"the {what} file the technician carried")
        parser.add_argument(
            "--out", required=True, help=f"the answer file to write (mode 600), {answer}"
        )
        parser.add_argument("--force", action="store_true", help="replace an existing --out")

    return add


COMMANDS = [
    Command(
        "offline-activate",
        online=True,
        summary="answer an air-gapped camera's activation request file",
        handler=cmd_offline_activate,
        description=(
            "Read an activation request file (python -m devices offline-request on the "
            "camera) and write the answer file the camera installs (python -m devices "
            "offline-install): the seat is taken as an online activation takes it (the same "
            "request again takes no second seat); refusals are the activation's."
        ),
        arguments=_file_arguments("activation request (.svcreq)", "a .svcresp file"),
    ),
    Command(
        "offline-usage",
        online=True,
        summary="store an air-gapped camera's usage file, write its receipt",
        handler=cmd_offline_usage,
        description=(
            "Read a usage export file (python -m devices usage-export on the camera): its "
            "records are stored as POST /v1/usage stores them, and the answer file holds "
            "the signed receipt and the licence's status (a revocation reaches the camera "
            "with it). Reading the same file again stores nothing new."
        ),
        arguments=_file_arguments("usage export (.svcuse)", "a .svcrcpt file"),
    ),
]
