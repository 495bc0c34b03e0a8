"""The Beam pipeline's Python Kafka I/O, its pure parts: how a partition's read may be
split, and where its credentials live (the broker-facing behaviour is in
tests/integration/test_beam.py)."""

from __future__ import annotations

import pickle

import pytest
from apache_beam.io.restriction_trackers import OffsetRange

from pipelines.beam.kafka_io import (
    END,
    NoConnection,
    ReadPartitions,
    WriteTexts,
    _connection,
    _FromStartOffset,
    _ReadPartitionFn,
    _WriteFn,
)
from pipelines.running import registry
from pipelines.settings import load_settings

pytestmark = pytest.mark.unit

PASSWORD = "canary-7d1f0c2e"


def secured_settings(monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", PASSWORD)
    return load_settings(
        "enrich",
        sections=registry.load("enrich").sections,
        environ={},
        overrides=[
            "kafka.security.protocol=SASL_PLAINTEXT",
            "kafka.security.sasl_mechanism=SCRAM-SHA-512",
            "kafka.security.username=app",
            "kafka.security.password=${env:KAFKA_PASSWORD}",
        ],
    ).settings


def test_a_partition_starts_at_its_offset_and_is_never_split_but_to_resume():
    provider = _FromStartOffset()
    assert provider.initial_restriction("orders|2|1500") == OffsetRange(1500, END)
    assert list(provider.split("orders|2|1500", OffsetRange(1500, END))) == [OffsetRange(1500, END)]
    tracker = provider.create_tracker(OffsetRange(1500, END))
    assert tracker.try_claim(1500) and tracker.try_claim(1507)
    # A runner's split at a fraction would start a second reader half way to END.
    assert tracker.try_split(0.5) is None
    # defer_remainder's split (fraction 0): done up to the last claim, the rest resumes.
    primary, residual = tracker.try_split(0)
    assert (primary, residual) == (OffsetRange(1500, 1508), OffsetRange(1508, END))


def test_the_pickled_dofns_carry_a_token_not_the_credentials(monkeypatch):
    settings = secured_settings(monkeypatch)
    read = ReadPartitions(settings, {("orders", 0): 0})
    write = WriteTexts(settings, "out", "records", None)
    fns = [
        _ReadPartitionFn(read.token, read.group_id, read.isolation, read.commit),
        _WriteFn(write.token, "out", "records", None),
    ]
    for fn in fns:
        pickled = pickle.dumps(fn)  # uncompressed, unlike Beam's pickler: readable bytes
        assert PASSWORD.encode() not in pickled
        assert pickle.loads(pickled).token in (read.token, write.token)
    assert _connection(read.token)["sasl.password"] == PASSWORD
    assert _connection(write.token)["sasl.username"] == "app"


def test_a_dofn_outside_the_launching_process_says_where_its_connection_is():
    with pytest.raises(NoConnection, match="lives in the process that launched it"):
        _connection("not-a-token")
