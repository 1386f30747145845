"""``jsontext.loads``: the standard library's value or error for every text, orjson doing the work
where the two agree."""
from __future__ import annotations

import json

import pytest

from coordinator.core import jsontext

TEXTS = [
    '{"a": 1, "a": 2}', "-0", "-0.0", "1e308", "1e-400", "[1E2]", "0.1", "5e-324", "9007199254740993",
    "123456789012345678",                  # 18 digits: orjson's
    "1234567890123456789",                 # 19 digits, within 64 bits
    "18446744073709551616",                # past 64 bits: orjson would give a float
    '{"cell": 123456789012345678901234567890, "x": [1.5]}',
    '"\\ud800"', '"\\ud83d\\ude00"', "NaN", "[Infinity]", "1.7976931348623157e309",
    "\ufeff[1]", "[1,]", "01", '"a\tb"', '"é ✓"', '"a\\u0000b"', "[" * 1100 + "]" * 1100,
]


def _outcome(fn, text):
    try:
        value = fn(text)
    except RecursionError:
        return "RecursionError"
    except ValueError as exc:
        return type(exc).__name__, str(exc)
    return repr(value), type(value)


@pytest.mark.parametrize("text", TEXTS)
def test_every_text_reads_as_the_json_module_reads_it(text):
    assert _outcome(jsontext.loads, text) == _outcome(json.loads, text)
    raw = text.encode("utf-8", "surrogatepass")
    assert _outcome(jsontext.loads, raw) == _outcome(json.loads, raw)


def test_a_run_of_nineteen_digits_is_found_wherever_it_lies():
    assert not jsontext.has_long_digit_run(b'{"id": 123456789012345678, "v": "0.123456789012345678"}')
    assert jsontext.has_long_digit_run(b"1234567890123456789")
    assert jsontext.has_long_digit_run(b'["x", 0.12345678901234567890]')
    assert jsontext.has_long_digit_run(b'"sha:a0123456789012345678z"')     # in a string too: read by json, alike


def test_plain_documents_are_read_by_orjson(monkeypatch):
    """The point of the module: a job's photo list, say, never reaches the standard library."""
    def refuse(*_a, **_k):
        raise AssertionError("json.loads was used")
    monkeypatch.setattr(jsontext.json, "loads", refuse)
    doc = [{"id": "syn-109-160", "lon": 2.3479754, "lat": 49.2988576, "width": 256, "cell": 617700169958293503,
            "capturedAt": "2026-06-01T08:18:40+00:00", "note": "é ✓", "pitch": 0.0, "none": None}]
    assert jsontext.loads(json.dumps(doc)) == doc
    assert jsontext.loads(json.dumps(doc).encode()) == doc
