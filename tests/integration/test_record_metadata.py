"""Keys, headers and timestamps: the byte-exact copy keeps everything (tombstones and invalid
UTF-8 included); a job whose output record corresponds to one input record carries that
record's key, headers and timestamp, or takes its key from `sink.key_field`; the windowed
job keys its counts by the window key. Read back with read_committed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipelines_dev.demo import demo_record
from pipelines_dev.topics import create_topics, produce, read_messages
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration

BASE_TS = 1_764_000_000_000


def _headers(message) -> tuple:
    return tuple((k, v) for k, v in (message.headers() or []))


def _bounded(kafka, names, **kw):
    return [*topic_args(kafka, names, **kw), "--set", "source.bounded=true"]


def test_passthrough_is_byte_exact_with_headers_tombstones_and_invalid_utf8(kafka, names):
    count = 240
    values = [
        None if i % 11 == 0 else (b"\xff\xfe raw " + bytes([i % 256])) if i % 5 == 0 else
        f"record-{i}".encode()
        for i in range(count)
    ]  # fmt: skip
    keys = [
        None if i % 7 == 0 else b"" if i % 13 == 0 else bytes([i % 256, 0xFF]) for i in range(count)
    ]
    headers = [
        [] if i % 3 == 0 else [("trace", f"t{i}".encode()), ("trace", b"\x00\xff"), ("none", None)]
        for i in range(count)
    ]
    stamps = [BASE_TS + i * 1000 for i in range(count)]
    create_topics(kafka, {names("in"): 3, names("out"): 3})
    produce(kafka, names("in"), values, keys=keys, timestamps=stamps, headers=headers)

    run_cli("run", "passthrough", *_bounded(kafka, names))

    got = Counter(
        (m.key(), m.value(), _headers(m), m.timestamp()[1])
        for m in read_messages(kafka, names("out"))
    )
    sent = Counter(zip(keys, values, (tuple(h) for h in headers), stamps))
    assert got == sent


def _keyed_input(kafka, names, count=150):
    records = [demo_record(i, BASE_TS + i * 10) for i in range(count)]
    keys = [f"user-{i}".encode() for i in range(count)]
    headers = [[("trace", f"t-{i}".encode()), ("empty", None)] for i in range(count)]
    stamps = [BASE_TS + i * 1000 for i in range(count)]
    produce(
        kafka,
        names("in"),
        [json.dumps(r).encode() for r in records],
        keys=keys,
        timestamps=stamps,
        headers=headers,
    )
    return {r["id"]: (key, tuple(h), ts) for r, key, h, ts in zip(records, keys, headers, stamps)}


def _by_id(kafka, topic):
    out = {}
    for m in read_messages(kafka, topic):
        record = json.loads(m.value())
        assert record["id"] not in out, f"id {record['id']} written twice"
        out[record["id"]] = (m.key(), _headers(m), m.timestamp()[1], record)
    return out


def test_enrich_carries_key_headers_and_timestamp_or_keys_by_a_field(
    kafka, names, enrichment_service
):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("out2"): 2, names("dlq"): 1})
    sent = _keyed_input(kafka, names)
    service = ["--set", f"demo_service.url={enrichment_service.url}"]
    run_cli("run", "enrich", *_bounded(kafka, names, dead_letters=True), *service)
    out = _by_id(kafka, names("out"))
    assert {i: (k, h, ts) for i, (k, h, ts, _) in out.items()} == sent

    second = run_cli(
        "run",
        "enrich",
        *_bounded(kafka, names, out="out2", tx_suffix="-2", dead_letters=True),
        *service,
        "--set",
        "source.group_id=" + names("group2"),
        "--set",
        "sink.key_field=company",
        "--set",
        "sink.carry_headers=false",
    )
    out2 = _by_id(kafka, names("out2"))
    assert sorted(out2) == sorted(sent), second.stdout + second.stderr
    assert all(k == r["company"].encode() for k, _, _, r in out2.values())
    assert all(h == () for _, h, _, _ in out2.values())


def test_validated_passthrough_carries_key_headers_and_timestamp(kafka, names):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    sent = _keyed_input(kafka, names)
    run_cli(
        "run",
        "passthrough",
        *_bounded(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",
    )
    out = _by_id(kafka, names("out"))
    assert {i: (k, h, ts) for i, (k, h, ts, _) in out.items()} == sent


def test_windowed_counts_are_keyed_by_the_window_key(kafka, names):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1, names("late"): 1})
    records = [{"id": i, "key": f"k{i % 4}", "ts": BASE_TS + i * 250} for i in range(160)]
    produce(kafka, names("in"), [json.dumps(r) for r in records], keys=[b"input-key"] * 160)
    run_cli(
        "run",
        "windowed",
        *_bounded(kafka, names, dead_letters=True, late=True),
        "--set",
        "watermarks.max_out_of_orderness=60s",
    )
    counts = [(m.key(), json.loads(m.value())) for m in read_messages(kafka, names("out"))]
    assert counts and all(key == c["key"].encode() for key, c in counts)
    # Every window exactly once, with its count: 160 records of 4 keys, 250 ms apart, in
    # 10 s windows (40 per window, 10 per key and window).
    expected = Counter(
        (r["key"], BASE_TS + (r["ts"] - BASE_TS) // 10_000 * 10_000) for r in records
    )
    assert sorted((c["key"], c["window_start"], c["count"]) for _, c in counts) == sorted(
        (key, start, n) for (key, start), n in expected.items()
    )
