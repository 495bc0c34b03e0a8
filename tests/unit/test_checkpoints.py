"""Choosing what to resume from, and refusing a restore whose sink transactions the broker
has already aborted. Checkpoint directories are laid out as Flink leaves them
(`<storage>/<job-id>/chk-<n>/_metadata`, savepoints `<dir>/savepoint-<id>/_metadata`)."""

from __future__ import annotations

import os

import pytest

from pipelines.flink.checkpoints import resolve_checkpoint, restore_points, transaction_risk
from pipelines.settings import ConfigError, load_settings

pytestmark = pytest.mark.unit


def settings(tmp_path, *sets: str):
    overrides = [
        f"checkpoint.storage=file://{tmp_path}/chk/{{job}}",
        f"checkpoint.savepoints=file://{tmp_path}/sp/{{job}}",
        *sets,
    ]
    return load_settings("passthrough", overrides=overrides, environ={}).settings


def metadata(directory, mtime: float):
    directory.mkdir(parents=True)
    (directory / "_metadata").write_bytes(b"x")
    os.utime(directory / "_metadata", (mtime, mtime))
    return directory


def test_latest_is_the_newest_checkpoint_or_savepoint_by_its_metadata(tmp_path):
    s = settings(tmp_path)
    chk = tmp_path / "chk/passthrough"
    metadata(chk / "job-a/chk-3", 1_000)
    newest = metadata(chk / "job-b/chk-9", 3_000)
    metadata(chk / "job-b/chk-12", 2_000)
    (chk / "job-b/chk-13").mkdir()  # incomplete: no _metadata
    assert resolve_checkpoint(s, "latest") == newest.as_uri()
    savepoint = metadata(tmp_path / "sp/passthrough/savepoint-1", 4_000)
    assert resolve_checkpoint(s, "latest") == savepoint.as_uri()
    assert [p.name for p in restore_points(s)] == ["chk-3", "chk-12", "chk-9", "savepoint-1"]


def test_latest_with_nothing_retained_names_both_places(tmp_path):
    with pytest.raises(ConfigError) as err:
        resolve_checkpoint(settings(tmp_path), "latest")
    assert str(err.value) == (
        f"--from-checkpoint latest: no retained checkpoint under file://{tmp_path}/chk/"
        f"passthrough and no savepoint under file://{tmp_path}/sp/passthrough "
        "(is checkpoint.retention `retain`?)"
    )


def test_latest_cannot_search_remote_storage(tmp_path):
    s = settings(tmp_path, "checkpoint.storage=s3://bucket/chk/{job}")
    with pytest.raises(ConfigError) as err:
        resolve_checkpoint(s, "latest")
    assert str(err.value) == (
        "checkpoint.storage: s3://bucket/chk/passthrough: `latest` can only search a local "
        "file:// directory; pass the checkpoint path instead"
    )


def test_remote_savepoints_are_not_listed_but_local_checkpoints_are(tmp_path):
    s = settings(tmp_path, "checkpoint.savepoints=s3://bucket/sp")
    found = metadata(tmp_path / "chk/passthrough/j/chk-1", 1_000)
    assert resolve_checkpoint(s, "latest") == found.as_uri()


def test_a_path_is_taken_only_when_it_holds_metadata(tmp_path):
    s = settings(tmp_path)
    empty = tmp_path / "chk-5"
    empty.mkdir()
    for given in (str(empty), empty.as_uri()):
        with pytest.raises(ConfigError) as err:
            resolve_checkpoint(s, given)
        assert str(err.value) == (
            f"--from-checkpoint {given}: no _metadata there; not a complete checkpoint or savepoint"
        )
    done = metadata(tmp_path / "chk-6", 1_000)
    assert resolve_checkpoint(s, str(done)) == str(done)
    assert resolve_checkpoint(s, done.as_uri()) == done.as_uri()
    assert resolve_checkpoint(s, "s3://bucket/chk-7") == "s3://bucket/chk-7"  # not checked here


def _risk_settings(tmp_path, *sets):
    return settings(
        tmp_path,
        "sink.delivery=exactly-once",
        "sink.transactional_id_prefix=tx",
        "checkpoint.interval=30s",
        "sink.transaction_timeout=15min",
        *sets,
    )


def test_a_restore_is_refused_once_its_transactions_may_have_timed_out(tmp_path):
    s = _risk_settings(tmp_path)
    chk = metadata(tmp_path / "chk-1", 10_000)
    # Transactions began up to 30 s before the checkpoint: safe while age + 30 s < 900 s.
    assert transaction_risk(s, str(chk), now=10_000 + 869) is None
    assert transaction_risk(s, str(chk), now=10_000 + 869.9) is None
    risk = transaction_risk(s, chk.as_uri(), now=10_000 + 870)
    assert risk == (
        f"--from-checkpoint {chk.as_uri()}: written 14.5 min ago; its sink transactions began "
        "up to checkpoint.interval (30 s) before it, so 15.0 min >= sink.transaction_timeout "
        "(15.0 min): the broker has aborted them, and the records they held (up to one "
        "checkpoint interval of output per sink subtask) would be lost without an error. "
        "Restore anyway with --accept-transaction-loss, or re-read the input from offsets "
        "(source.start) into a fresh output"
    )


def test_ages_under_two_minutes_are_shown_in_seconds(tmp_path):
    s = _risk_settings(tmp_path, "checkpoint.interval=10s", "sink.transaction_timeout=1min")
    chk = metadata(tmp_path / "chk-1", 0)
    assert transaction_risk(s, str(chk), now=49) is None
    risk = transaction_risk(s, str(chk), now=50)
    assert "written 50 s ago" in risk and "so 60 s >= sink.transaction_timeout (60 s)" in risk
    assert "written 2.0 min ago" in transaction_risk(s, str(chk), now=120)


def test_no_risk_without_transactions_or_readable_metadata(tmp_path):
    chk = metadata(tmp_path / "chk-1", 0)
    at_least_once = settings(tmp_path, "sink.delivery=at-least-once")
    assert transaction_risk(at_least_once, str(chk), now=10**9) is None
    s = _risk_settings(tmp_path)
    assert transaction_risk(s, "s3://bucket/chk-1", now=10**9) is None  # age unknown
    assert transaction_risk(s, str(tmp_path / "missing"), now=10**9) is None
    assert transaction_risk(s, str(chk), now=10**9) is not None
