"""Golden vectors and properties of the ``write-task-v1`` request digest.

Every expected value here was derived by hand from the published scheme (DESIGN.md section 3,
``surehand/digest.py``): the canonical JSON is written out literally and its SHA-256 is a
constant, so these vectors pin the scheme itself, not whatever the implementation does today.
Clients in other languages can test themselves against the same table (docs/write-task.md,
"The write-task-v1 digest").
"""

from __future__ import annotations

import hashlib
import json
import random
import unicodedata
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surehand.digest import canonical_json, operation_fingerprint, request_digest
from surehand.model import DIGEST_SCHEMA_VERSION
from tests.submission_helpers import fields_of

MINIMAL = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}


def canonical(data: dict[str, Any]) -> bytes:
    """The canonical JSON of a request, through the validating edge (defaults filled in)."""
    return canonical_json(fields_of(data).semantic_dict())


def digest(data: dict[str, Any]) -> str:
    return request_digest(fields_of(data))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# (name, request, canonical JSON written out by hand, its SHA-256)
GOLDEN: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "minimal",
        MINIMAL,
        '{"body":"","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "235329e20f54e968c6b7d9b3eb265aa6b9b537c80a9598896b60215bd7df69d0",
    ),
    (
        "priority P0",
        {**MINIMAL, "priority": "P0"},
        '{"body":"","depends_on":[],"parent":"","priority":"P0","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "4c32f950782de90271d6ee46b65bd68c2e5fa3c91f55e5427b0a26eb465e03f8",
    ),
    (
        "priority P1",
        {**MINIMAL, "priority": "P1"},
        '{"body":"","depends_on":[],"parent":"","priority":"P1","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "aa392c99948e40f319e7d7556cea15e7ed12194410cd69492eef2484d76b20ea",
    ),
    (
        "priority P3",
        {**MINIMAL, "priority": "P3"},
        '{"body":"","depends_on":[],"parent":"","priority":"P3","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "ab96c33742708f291e674d0ee9aa65a279513b28775385fb148d5c34ce642ac4",
    ),
    (
        "non-ASCII body",
        {**MINIMAL, "body": "café"},
        '{"body":"café","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "f1b5103f8294bdc141ff88fc47c355f6dee648aeb34b9fbd93bba4d81091ebf3",
    ),
    (
        "line endings",
        {**MINIMAL, "body": "one\ntwo\nthree\n"},
        '{"body":"one\\ntwo\\nthree\\n","depends_on":[],"parent":"","priority":"P2",'
        '"recipient":"DEV","references":[],"risk_level":"medium","sender":"PM",'
        '"subject":"Fix login","thread_key":""}',
        "aafd010890b04b932a38f4d72f0b70e533ff5f6d9ec3f56468464877109700a8",
    ),
    (
        "references a, b",
        {**MINIMAL, "references": ["a", "b"]},
        '{"body":"","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":["a","b"],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "7fe5581fa04ef043fc6c73c4569f9f079410313647bbb32156b153d9e75eea41",
    ),
    (
        "references b, a",
        {**MINIMAL, "references": ["b", "a"]},
        '{"body":"","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":["b","a"],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":""}',
        "36893d262c9c586d9cb1ff6ba43592dd488f4f034be3c79362172e27ef0bd054",
    ),
    (
        "another subject",
        {**MINIMAL, "subject": "Fix logout"},
        '{"body":"","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix logout",'
        '"thread_key":""}',
        "7fafeb85919939bbfcf2dd5f8882734e0307ba73c6515940ff0b12ed22670781",
    ),
    (
        # A field added after write-task-v1 is digested only when given (the minimal vector
        # above, without it, is unchanged).
        "time limit given",
        {**MINIMAL, "time_limit_seconds": 600},
        '{"body":"","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        '"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        '"thread_key":"","time_limit_seconds":600}',
        "b67f8d23c78faf011b179eff34bc8d20473bb4cd1460ab67a3db8300d875b2f5",
    ),
    (
        "every field",
        {
            "sender": "PM",
            "recipient": "QA",
            "subject": "Re\u0301viser le login 日本",
            "body": 'Über naïve café — ok\r\n\tdone "quoted" \\ end',
            "priority": "high",
            "thread_key": "login-fix",
            "parent": "TASK-20261130-001",
            "references": ["spec:login", "https://example.com/a?b=c"],
            "depends_on": ["TASK-20261130-002"],
            "risk_level": "high",
        },
        '{"body":"Über naïve café — ok\\n\\tdone \\"quoted\\" \\\\ end",'
        '"depends_on":["TASK-20261130-002"],"parent":"TASK-20261130-001","priority":"P1",'
        '"recipient":"QA","references":["spec:login","https://example.com/a?b=c"],'
        '"risk_level":"high","sender":"PM","subject":"Réviser le login 日本",'
        '"thread_key":"login-fix"}',
        "e3f01d2a4f1a6988c9d3107070d0534730b63a1e1577d3ee1f4f4930d6e61ec9",
    ),
]


@pytest.mark.parametrize(
    ("data", "expected_json", "expected_digest"),
    [pytest.param(data, text, hexdigest, id=name) for name, data, text, hexdigest in GOLDEN],
)
def test_each_golden_vector_has_its_literal_canonical_json_and_digest(
    data: dict[str, Any], expected_json: str, expected_digest: str
) -> None:
    assert sha256(expected_json) == expected_digest  # the table is self-consistent
    assert canonical(data) == expected_json.encode("utf-8")
    assert digest(data) == expected_digest


def test_non_ascii_is_written_as_raw_utf8_not_as_escapes() -> None:
    assert canonical({**MINIMAL, "body": "café"}) == (
        b'{"body":"caf\xc3\xa9","depends_on":[],"parent":"","priority":"P2","recipient":"DEV",'
        b'"references":[],"risk_level":"medium","sender":"PM","subject":"Fix login",'
        b'"thread_key":""}'
    )


def test_the_digest_schema_is_named_write_task_v1() -> None:
    assert DIGEST_SCHEMA_VERSION == "write-task-v1"


def test_giving_every_default_explicitly_gives_the_minimal_digest() -> None:
    explicit = {
        **MINIMAL,
        "body": "",
        "priority": "P2",
        "thread_key": "",
        "parent": "",
        "references": [],
        "depends_on": [],
        "risk_level": "medium",
    }
    assert digest(explicit) == GOLDEN[0][3]


@pytest.mark.parametrize(
    ("alias", "code"),
    [
        ("urgent", "P0"),
        ("critical", "P0"),
        ("high", "P1"),
        ("normal", "P2"),
        ("low", "P3"),
        ("URGENT", "P0"),
        (" High ", "P1"),
        ("p3", "P3"),
    ],
)
def test_a_priority_alias_digests_like_its_p_code(alias: str, code: str) -> None:
    expected = {"P0": GOLDEN[1][3], "P1": GOLDEN[2][3], "P2": GOLDEN[0][3], "P3": GOLDEN[3][3]}
    assert digest({**MINIMAL, "priority": alias}) == expected[code]


def test_a_decomposed_body_digests_like_the_composed_one() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert composed != decomposed
    assert digest({**MINIMAL, "body": decomposed}) == digest({**MINIMAL, "body": composed})
    assert digest({**MINIMAL, "body": composed}) == GOLDEN[4][3]


@pytest.mark.parametrize(
    "body", ["one\r\ntwo\r\nthree\r\n", "one\rtwo\rthree\r", "one\r\ntwo\rthree\n"]
)
def test_crlf_and_cr_digest_like_lf(body: str) -> None:
    assert digest({**MINIMAL, "body": body}) == GOLDEN[5][3]


def test_the_key_order_of_the_input_mapping_does_not_matter() -> None:
    full = GOLDEN[-1][1]
    reversed_keys = dict(reversed(list(full.items())))
    assert list(reversed_keys) != list(full)
    assert digest(reversed_keys) == digest(full) == GOLDEN[-1][3]


def test_array_order_matters() -> None:
    ab = digest({**MINIMAL, "references": ["a", "b"]})
    ba = digest({**MINIMAL, "references": ["b", "a"]})
    assert ab != ba
    assert (ab, ba) == (GOLDEN[6][3], GOLDEN[7][3])


def test_a_different_subject_gives_a_different_digest() -> None:
    assert digest({**MINIMAL, "subject": "Fix logout"}) != digest(MINIMAL)


def test_transport_fields_are_not_digested() -> None:
    with_id = {**MINIMAL, "client_submission_id": "sub-1"}
    assert digest(with_id) == GOLDEN[0][3]


def test_operation_fingerprint_golden_vector() -> None:
    # lower("Send_Email") + "\n" + canonical JSON of the args (keys sorted, NFC, UTF-8).
    preimage = b'send_email\n{"attempt":1,"subject":"Bonjour \xc3\xa9","to":"a@example.com"}'
    expected = "4ce9c3f1d46a66d824191833"
    assert hashlib.sha256(preimage).hexdigest()[:24] == expected
    args = {"to": "a@example.com", "subject": "Bonjour e\u0301", "attempt": 1}
    assert operation_fingerprint("Send_Email", args) == expected
    assert operation_fingerprint("SEND_EMAIL", dict(reversed(list(args.items())))) == expected


# -- properties -------------------------------------------------------------------------------

# Text without CR (added by the variants) and without NUL or surrogates (rejected at the edge).
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\x00"),
    max_size=40,
)
SUBJECT = st.builds(lambda head, tail: head + tail, st.sampled_from("AbZé日"), TEXT)
REFERENCE = st.builds(lambda head, tail: head + tail, st.sampled_from("ar-"), TEXT)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "sender": draw(st.sampled_from(["PM", "ADMIN", "LEAD-QA"])),
        "recipient": draw(st.sampled_from(["DEV", "QA", "OPS_2"])),
        "subject": draw(SUBJECT),
        "body": draw(TEXT),
        "priority": draw(st.sampled_from(["P0", "P1", "P2", "P3", "urgent", "low"])),
        "thread_key": draw(TEXT),
        "references": draw(st.lists(REFERENCE, max_size=4)),
        "risk_level": draw(st.sampled_from(["low", "medium", "high", "irreversible"])),
    }


def _line_endings(text: str, rng: random.Random, mode: str) -> str:
    if mode == "cr":  # every LF becomes a lone CR
        return text.replace("\n", "\r")
    # each LF independently stays or becomes CRLF (a CR before an unchanged LF would merge)
    return "".join("\r\n" if ch == "\n" and rng.random() < 0.5 else ch for ch in text)


def _variant(
    data: dict[str, Any], seed: int, mode: str, form: Literal["NFC", "NFD"]
) -> dict[str, Any]:
    rng = random.Random(seed)

    def change(text: str) -> str:
        return unicodedata.normalize(form, _line_endings(text, rng, mode))

    changed: dict[str, Any] = {}
    for key, value in data.items():
        if key in {"subject", "body", "thread_key"}:
            changed[key] = change(value)
        elif key == "references":
            changed[key] = [change(item) for item in value]
        else:
            changed[key] = value
    keys = list(changed)
    rng.shuffle(keys)
    return {key: changed[key] for key in keys}


@settings(max_examples=150, deadline=None)
@given(
    data=requests(),
    seed=st.integers(0, 2**32),
    mode=st.sampled_from(["crlf", "cr"]),
    form=st.sampled_from(["NFD", "NFC"]),
)
def test_the_digest_ignores_line_endings_unicode_normal_form_and_key_order(
    data: dict[str, Any], seed: int, mode: str, form: Literal["NFC", "NFD"]
) -> None:
    assert digest(_variant(data, seed, mode, form)) == digest(data)


@settings(max_examples=100, deadline=None)
@given(data=requests(), seed=st.integers(0, 2**32))
def test_the_canonical_json_is_a_fixed_point_with_nfc_lf_strings(
    data: dict[str, Any], seed: int
) -> None:
    raw = canonical(_variant(data, seed, "crlf", "NFD"))
    parsed = json.loads(raw)
    assert list(parsed) == sorted(parsed)
    strings = [value for value in parsed.values() if isinstance(value, str)]
    strings += [item for value in parsed.values() if isinstance(value, list) for item in value]
    for text in strings:
        assert "\r" not in text
        assert unicodedata.is_normalized("NFC", text)
    assert canonical_json(parsed) == raw
