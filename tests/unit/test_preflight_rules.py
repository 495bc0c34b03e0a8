"""Preflight rules that need only the settings: each with the message it prints."""

from __future__ import annotations

import pytest

from pipelines.preflight import static_problems
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
