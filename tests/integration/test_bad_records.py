"""No record can stop a job: every pathological record among good ones, one run per job.

Each run reads a topic where poison records sit between good ones and must finish on its
own (bounded source). Good records are read back exactly with read_committed, and every
poison record is in the dead-letter topic exactly once, with its reason and origin.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.enrichment_service import company_profile
from pipelines_dev.topics import create_topics, produce, read_all, read_messages
from tests.support import assert_nothing_committed, run_cli, topic_args

pytestmark = pytest.mark.integration

HUGE = b"\x00not json at all " * (900_000 // 17)  # ~900 KB: its dead letter must be cut

# (value, dead-letter reason) for both JSON jobs; the enrich job adds its own below.
POISON: list[tuple[bytes | None, str]] = [
    (b"\xff\xfe{bad", "not UTF-8: invalid start byte at byte 0"),
    (None, "empty record (null value)"),
    (HUGE, "not valid JSON: Expecting value at line 1 column 1"),
    (
        b"[" * 50_000 + b"]" * 50_000,
        "not parseable: JSON nested deeper than the parser's recursion limit",
    ),
    (
        b'{"id": ' + b"7" * 5000 + b"}",
        "not parseable: Exceeds the limit (4300 digits) for "
        "integer string conversion: value has 5000 digits; use "
        "sys.set_int_max_str_digits() to increase the limit",
    ),
    (
        b'{"id": 1, "company": "acme", "key": "a", "ts": NaN}',
        "not parseable: NaN is not valid JSON",
    ),
    (b"[1, 2, 3]", "not a JSON object: list"),
    (b'"just text"', "not a JSON object: str"),
    (
        b'{"id": 1, "company": "acme", "key": "a", "ts": 1, "_origin": {"x": 1}}',
        "field '_origin' is reserved for the record's origin (parse.origin_field); rename it in "
        "the data or set parse.origin_field",
    ),
]
ENRICH_POISON = POISON + [
    (b'{"id": 1, "company": null}', "required field(s) not usable: company is null"),
    (b'{"id": 1, "company": 42}', "required field(s) not usable: company is int, not string"),
    (b'{"company": "acme"}', "missing required field(s): id"),
    (b'{"id": 1, "company": "ghost"}', "enrichment refused the record: HTTP 404 from {url}"),
]
WINDOW_POISON = POISON + [
    (b'{"id": 1, "key": null, "ts": 1700000000000}', "required field(s) not usable: key is null"),
    (b'{"id": 1, "ts": 1700000000000}', "missing required field(s): key"),
    (b'{"id": 1, "key": "a", "ts": "yesterday"}', "ts is not epoch milliseconds: 'yesterday'"),
]


def interleave(good: list[bytes], poison: list[bytes | None]) -> list[bytes | None]:
    """Good records with one poison record after every `step` of them."""
    step = len(good) // (len(poison) + 1)
    out: list[bytes | None] = list(good)
    for n, bad in enumerate(poison, start=1):
        out.insert(n * step + n - 1, bad)
    return out


def check_dead_letters(kafka, topic, poison, expected_origin_topic, url=""):
    messages = [json.loads(m.value()) for m in read_messages(kafka, topic)]
    for m in read_messages(kafka, topic):
        assert len(m.value()) <= 1_048_576
    want = Counter(reason.format(url=url) for _, reason in poison)
    got = Counter(m["error"] for m in messages)
    assert got == want, f"dead letters differ: missing {want - got}, unexpected {got - want}"
    assert all(m["origin"]["topic"] == expected_origin_topic for m in messages)
    offsets = [(m["origin"]["partition"], m["origin"]["offset"]) for m in messages]
    assert len(set(offsets)) == len(offsets)
    huge = [m for m in messages if m.get("value_size") == len(HUGE)]
    assert len(huge) == 1 and huge[0]["value_truncated"] is True
    assert huge[0]["value_sha256"] == hashlib.sha256(HUGE).hexdigest()
    assert HUGE.startswith(base64.b64decode(huge[0]["value_b64"]))
    null = [m for m in messages if m["error"] == "empty record (null value)"]
    assert null[0]["value_b64"] is None
    return messages


def test_no_record_stops_the_enrich_job(kafka, names, enrichment_service):
    good = demo_values(300)
    good.append(json.dumps({"id": 300, "company": "acme", "source": "crm"}).encode())
    values = interleave(good, [v for v, _ in ENRICH_POISON])
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), values)
    enrichment_service.configure(latency_ms=5, unknown=["ghost"])
    proc = run_cli(
        "run",
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "enrichment.retries=3",
    )
    assert "job enrich finished" in proc.stdout, proc.stdout
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    assert sorted(r["id"] for r in out) == list(range(301))
    assert all(r["enrichment"] == company_profile(r["company"]) for r in out)
    [user_source] = [r for r in out if r["id"] == 300]
    assert user_source["source"] == "crm"  # a user field is never overwritten
    assert user_source["_origin"]["topic"] == names("in")
    check_dead_letters(
        kafka,
        names("dlq"),
        ENRICH_POISON,
        names("in"),
        url=f"{enrichment_service.url}/lookup/batch",
    )


# Where the parse stage runs (python.execution_mode): a worker process, or the JVM.
MODES = ["process", "thread"]


@pytest.mark.parametrize("mode", MODES)
def test_no_record_stops_the_windowed_job(kafka, names, mode):
    base = 1_700_000_000_000
    good = [
        json.dumps({"id": i, "key": "ab"[i % 2], "ts": base + i * 100}).encode() for i in range(300)
    ]
    values = interleave(good, [v for v, _ in WINDOW_POISON])
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1, names("late"): 1})
    produce(kafka, names("in"), values)
    proc = run_cli(
        "run",
        "windowed",
        *topic_args(kafka, names, dead_letters=True, late=True),
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "watermarks.max_out_of_orderness=1min",
        "--set",
        f"python.execution_mode={mode}",
    )
    assert "job windowed finished" in proc.stdout, proc.stdout
    emitted = sorted(
        (c["key"], c["window_start"], c["count"])
        for c in map(json.loads, read_all(kafka, names("out")))
    )
    expected = Counter(("ab"[i % 2], base + (i * 100) // 10_000 * 10_000) for i in range(300))
    # A multiset: a window emitted twice fails.
    assert emitted == sorted((key, start, n) for (key, start), n in expected.items())
    check_dead_letters(kafka, names("dlq"), WINDOW_POISON, names("in"))
    assert_nothing_committed(kafka, names("late"))


def test_the_passthrough_copy_is_byte_exact_whatever_the_bytes(kafka, names):
    """Without validation passthrough never looks at a record: poison records, a null value
    and invalid UTF-8 included, come out exactly as they went in."""
    good = demo_values(200)
    values = interleave(good, [v for v, _ in POISON])
    create_topics(kafka, {names("in"): 3, names("out"): 3})
    produce(kafka, names("in"), values)
    proc = run_cli(
        "run",
        "passthrough",
        *topic_args(kafka, names),
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
    )
    assert "job passthrough finished" in proc.stdout, proc.stdout
    assert Counter(read_all(kafka, names("out"))) == Counter(values)


@pytest.mark.parametrize("mode", MODES)
def test_no_record_stops_the_validating_passthrough_job(kafka, names, mode):
    good = demo_values(200)
    values = interleave(good, [v for v, _ in POISON])
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), values)
    proc = run_cli(
        "run",
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        f"python.execution_mode={mode}",
    )
    assert "job passthrough finished" in proc.stdout, proc.stdout
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    assert sorted(r["id"] for r in out) == list(range(200))
    assert all(r["_origin"]["topic"] == names("in") for r in out)
    check_dead_letters(kafka, names("dlq"), POISON, names("in"))
