"""The ingest's commit token (cec.ingest_token): one codec, byte-compatible with the
tokens the ingest wrote before it (and rescale after it), old tokens readable."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from cec.ingest_token import IngestToken, decode_token, encode_token

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
NAT = st.integers(0, (1 << 63) - 1)


@given(chunk=st.integers(-1, 1 << 40), next_seq=NAT, seq_end=NAT, late=NAT,
       watermark=st.none() | I64, at_end=st.none() | I64)
def test_round_trip(chunk: int, next_seq: int, seq_end: int, late: int,
                    watermark: int | None, at_end: int | None) -> None:
    tok = IngestToken(chunk, next_seq, seq_end, late, watermark, at_end)
    raw = encode_token(tok)
    assert decode_token(raw) == tok
    got = json.loads(raw)
    assert list(got) == ["chunk", "next_seq", "seq_end", "late"] + (
        [] if watermark is None else ["wm"]) + ([] if at_end is None else ["cw"])
    assert got.get("wm") == watermark and got.get("cw") == at_end
    assert tok.at_chunk_end == (watermark if at_end is None else at_end)


def test_todays_bytes_decode_and_encode_the_same() -> None:
    """The exact bytes the writer's ``_token`` wrote (json.dumps, default separators)."""
    raw = b'{"chunk": 12, "next_seq": 4000000, "seq_end": 3999990, "late": 10}'
    tok = decode_token(raw)
    assert tok == IngestToken(chunk=12, next_seq=4000000, seq_end=3999990, late=10,
                              watermark=None)
    assert encode_token(tok) == raw
    with_wm = encode_token(IngestToken(12, 4000000, 3999990, 10, 1795756044435420))
    assert with_wm == raw[:-1] + b', "wm": 1795756044435420}'


def test_tokens_from_before_late_rows_and_watermarks() -> None:
    """No ``seq_end``: it is ``next_seq``; no ``late``: 0; no ``wm``: None."""
    assert decode_token(b'{"chunk": 0, "next_seq": 100}') == IngestToken(0, 100, 100, 0)
    assert decode_token(b'{"chunk": 3, "next_seq": 400, "seq_end": 380}') == \
        IngestToken(3, 400, 380, 0, None)


def test_no_token_or_not_an_ingest_token_is_none() -> None:
    for raw in (None, b"", b"7", b"t3", b"\xff\xfe", b"[1, 2]", b'{"chunk": 1}',
                b'{"next_seq": 1}', b'{"chunk": "1", "next_seq": 2}',
                b'{"chunk": true, "next_seq": 2}', b"{not json"):
        assert decode_token(raw) is None, raw


def test_fields_of_the_wrong_type_fall_back() -> None:
    """A ``wm`` or ``late`` that is not an integer reads as absent."""
    tok = decode_token(b'{"chunk": 1, "next_seq": 2, "seq_end": 2, "late": "x", '
                       b'"wm": 1.5}')
    assert tok == IngestToken(1, 2, 2, 0, None)
