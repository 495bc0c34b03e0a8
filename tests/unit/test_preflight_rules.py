"""Preflight rules that need only the settings: each with the message it prints."""

from __future__ import annotations

import pytest

from pipelines.kafka.preflight import static_problems
from pipelines.settings import load_settings

pytestmark = pytest.mark.unit


def problems(*overrides: str) -> list[str]:
    settings = load_settings("passthrough", overrides=list(overrides), environ={}).settings
    return [str(p) for p in static_problems(settings)]


def test_committed_config_is_clean():
    assert problems() == []


def test_exactly_once_without_checkpointing():
    assert problems("checkpoint.enabled=false", "source.commit_offsets_on_checkpoint=false") == [
        "error: sink.delivery: exactly-once needs checkpointing: Kafka transactions commit only "
        "when a checkpoint completes; set checkpoint.enabled: true or choose sink.delivery: "
        "at-least-once"
    ]


def test_exactly_once_without_prefix():
    assert problems("sink.transactional_id_prefix=null") == [
        "error: sink.transactional_id_prefix: exactly-once needs a transactional id prefix that "
        "is unique per job and stable across restarts"
    ]


def test_transaction_timeout_not_above_interval_plus_timeout():
    assert problems(
        "sink.transaction_timeout=2min", "checkpoint.interval=1min", "checkpoint.timeout=1min"
    ) == [
        "error: sink.transaction_timeout: 2min must be greater than checkpoint.interval + "
        "checkpoint.timeout (1min + 1min = 2min), or the broker aborts transactions that a slow "
        "checkpoint has not committed yet"
    ]


def test_group_offsets_without_group():
    assert problems("source.group_id=null") == [
        "error: source.group_id: start mode group-offsets needs a group id to read committed "
        "offsets from",
        "warning: source.group_id: no group id: the source will not commit offsets to Kafka, so "
        "lag cannot be monitored and group-offsets restarts start from the fallback",
    ]


def test_commit_on_checkpoint_with_checkpointing_off():
    assert problems("checkpoint.enabled=false", "sink.delivery=at-least-once") == [
        "error: source.commit_offsets_on_checkpoint: offsets are committed only when a checkpoint "
        "completes, and checkpointing is off: enable checkpointing or set "
        "commit_offsets_on_checkpoint: false"
    ]


def test_a_replicated_cluster_is_checked_for_records_an_acknowledgement_could_lose():
    from pipelines.kafka.preflight import durability_problems

    written = {
        "sink.topic": ("out", 1, 1),
        "sink.dead_letter_topic": ("dlq", 3, 1),
        "window.late_topic": ("late", 2, 2),
    }
    assert [str(p) for p in durability_problems(3, written, (1, 1))] == [
        "warning: sink.topic: topic 'out' has 1 replica on a cluster of 3 brokers: its records "
        "are lost with that broker; create it with replication factor 3",
        "warning: sink.dead_letter_topic: topic 'dlq' has min.insync.replicas=1: acks=all then "
        "waits for the leader alone, and a record only the leader had is lost when that broker "
        "fails; set min.insync.replicas=2 (with 3 replicas)",
        "warning: window.late_topic: topic 'late' has min.insync.replicas=2 and 2 replicas: "
        "every write fails while one of its brokers is down; set min.insync.replicas=1",
        "warning: sink.delivery: the brokers' transaction.state.log.replication.factor=1 on a "
        "cluster of 3: a transaction's state (and whether it committed) is lost with that "
        "broker; set it to 3 before the first transaction",
    ]


def test_replication_3_with_min_isr_2_is_what_the_check_wants():
    from pipelines.kafka.preflight import durability_problems

    assert durability_problems(3, {"sink.topic": ("out", 3, 2)}, (3, 2)) == []
    assert durability_problems(5, {"sink.topic": ("out", 3, 2)}, (3, 2)) == []
    assert durability_problems(2, {"sink.topic": ("out", 2, None)}, (2, None)) == []
    (only,) = durability_problems(3, {}, (3, 1))
    assert str(only) == (
        "warning: sink.delivery: the brokers' transaction.state.log.min.isr=1: a commit "
        "acknowledged by one replica of the transaction log is lost with that broker; set it to 2"
    )
    (only,) = durability_problems(3, {}, (2, 2))
    assert "replication.factor=2 on a cluster of 3" in str(only) and "those brokers" in str(only)
