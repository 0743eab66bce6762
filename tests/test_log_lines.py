from __future__ import annotations

import io
import logging

from logkeel.log_lines import SafeFormatter, escape


def test_escape_keeps_text_and_escapes_line_breaks_controls_and_surrogates() -> None:
    assert escape("orders-ü 1\t2") == "orders-ü 1\t2"
    assert escape("a\nb\rc\x00d\x7f\x85\u2028") == "a\\x0ab\\x0dc\\x00d\\x7f\\x85\\u2028"
    assert escape(b"bad\xff".decode("utf-8", "surrogateescape")) == "bad\\udcff"


def test_a_forged_client_id_stays_on_one_line_of_valid_utf8() -> None:
    out = io.BytesIO()
    stream = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(SafeFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test_log_lines")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        client_id = "evil\n2026-01-01 ERROR forged" + b"\xfe".decode("utf-8", "surrogateescape")
        logger.warning("request from client id %s", client_id)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue().decode("utf-8")  # strict: valid UTF-8
    assert text.count("\n") == 1
    assert text == "WARNING request from client id evil\\x0a2026-01-01 ERROR forged\\udcfe\n"
