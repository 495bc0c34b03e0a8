"""Finding retained checkpoints and savepoints to resume from.

With retention `retain`, a cancelled or killed job leaves `<storage>/<job-id>/chk-<n>/`
behind, a stopped one a savepoint; `--from-checkpoint latest` picks the newest complete one
of either (it has `_metadata`).
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

from pipelines.flink.environment import checkpoint_dir, savepoint_dir
from pipelines.settings import ConfigError, Settings
from pipelines.settings.schema import DeliveryGuarantee


def _local_dir(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("file", ""):
        raise ConfigError(
            f"checkpoint.storage: {uri}: `latest` can only search a local "
            f"file:// directory; pass the checkpoint path instead"
        )
    return Path(parsed.path)


def retained_checkpoints(settings: Settings) -> list[Path]:
    """Complete retained checkpoints of this job, oldest first."""
    root = _local_dir(checkpoint_dir(settings))
    found = [m.parent for m in root.glob("*/chk-*/_metadata")]
    return sorted(found, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1])))


def restore_points(settings: Settings) -> list[Path]:
    """Retained checkpoints and savepoints of this job, oldest first (by their _metadata).

    Savepoints count: a job stopped with one finishes, and Flink deletes a finished job's
    checkpoints, so the newest checkpoint left is an earlier run's. Resuming from it
    would re-read input that the later run already wrote, and duplicate it."""
    found = retained_checkpoints(settings)
    try:
        found += [m.parent for m in _local_dir(savepoint_dir(settings)).glob("*/_metadata")]
    except ConfigError:  # savepoints on remote storage: not listed here
        pass
    return sorted(found, key=lambda p: (p / "_metadata").stat().st_mtime)


def resolve_checkpoint(settings: Settings, wanted: str) -> str:
    if wanted != "latest":
        path = Path(urlparse(wanted).path)
        if urlparse(wanted).scheme in ("", "file") and not (path / "_metadata").is_file():
            raise ConfigError(
                f"--from-checkpoint {wanted}: no _metadata there; "
                f"not a complete checkpoint or savepoint"
            )
        return wanted
    found = restore_points(settings)
    if not found:
        raise ConfigError(
            f"--from-checkpoint latest: no retained checkpoint under "
            f"{checkpoint_dir(settings)} and no savepoint under {savepoint_dir(settings)} "
            f"(is checkpoint.retention `retain`?)"
        )
    return found[-1].as_uri()


def _fmt(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def transaction_risk(settings: Settings, path: str, now: float | None = None) -> str | None:
    """Why restoring `path` may lose records silently, or None.

    An exactly-once sink's checkpoint holds transactions that it commits after the
    restore. Kafka aborts a transaction `transaction.timeout.ms` after it began (up to one
    checkpoint interval before the checkpoint), and Flink's committer then drops it with a
    warning: the records it held are gone from the output, and the restored offsets are
    past them. Only a local checkpoint's age can be read here (its _metadata)."""
    if settings.sink.delivery is not DeliveryGuarantee.EXACTLY_ONCE:
        return None
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        return None
    metadata = Path(parsed.path) / "_metadata"
    if not metadata.is_file():
        return None
    age = (time.time() if now is None else now) - metadata.stat().st_mtime
    interval_s = settings.checkpoint.interval / 1000
    timeout_s = settings.sink.transaction_timeout / 1000
    if age + interval_s < timeout_s:
        return None
    return (
        f"--from-checkpoint {path}: written {_fmt(age)} ago; its sink transactions began up to "
        f"checkpoint.interval ({_fmt(interval_s)}) before it, so {_fmt(age + interval_s)} >= "
        f"sink.transaction_timeout ({_fmt(timeout_s)}): the broker has aborted them, and the "
        f"records they held (up to one checkpoint interval of output per sink subtask) would be "
        f"lost without an error. Restore anyway with --accept-transaction-loss, or re-read the "
        f"input from offsets (source.start) into a fresh output"
    )
