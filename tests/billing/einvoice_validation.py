"""The official EN 16931 validation artefacts (CEN/TC 434, ../shared/validators/en16931/):
the Schematron rules compiled to XSLT 2.0, run with SaxonC-HE (saxonche), and the CII XML
Schema, run with lxml. A document passes when the rules report no fatal assertion and the
schema (CII) accepts it."""

from __future__ import annotations

import functools

from lxml import etree

from tests.conftest import REPO

VALIDATORS = REPO.parent / "shared" / "validators" / "en16931"
XSLT = {
    "cii": VALIDATORS / "cii" / "xslt" / "EN16931-CII-validation.xslt",
    "ubl": VALIDATORS / "ubl" / "xslt" / "EN16931-UBL-validation.xslt",
}
CII_XSD = (
    VALIDATORS / "cii" / "schema" / "D16B SCRDM (Subset)" / "uncoupled clm" / "CII"
    / "uncefact" / "data" / "standard" / "CrossIndustryInvoice_100pD16B.xsd"
)  # fmt: skip
SVRL = "{http://purl.oclc.org/dsdl/svrl}"


def available() -> bool:
    return all(path.is_file() for path in (*XSLT.values(), CII_XSD))


@functools.cache
def _processor():
    from saxonche import PySaxonProcessor

    return PySaxonProcessor(license=False)


@functools.cache
def _executable(syntax: str):
    compiler = _processor().new_xslt30_processor()
    return compiler.compile_stylesheet(stylesheet_file=str(XSLT[syntax]))


@functools.cache
def _cii_schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(CII_XSD)))


def schematron(xml: bytes, syntax: str) -> tuple[list[str], list[str]]:
    """(fatal, other) failed assertions of ``xml`` under the EN 16931 rules of
    ``syntax`` (``cii`` or ``ubl``), each as "[rule] text"."""
    node = _processor().parse_xml(xml_text=xml.decode())
    svrl = _executable(syntax).transform_to_string(xdm_node=node)
    report = etree.fromstring(svrl.encode())
    fatal, other = [], []
    for failed in report.iter(f"{SVRL}failed-assert"):
        text = " ".join(failed.findtext(f"{SVRL}text", "").split())
        (fatal if failed.get("flag") == "fatal" else other).append(text)
    return fatal, other


def cii_schema_errors(xml: bytes) -> list[str]:
    schema = _cii_schema()
    if schema.validate(etree.fromstring(xml)):
        return []
    return [str(error) for error in schema.error_log]
