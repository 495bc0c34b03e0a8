"""Finding retained checkpoints and savepoints to resume from.

With retention `retain`, a cancelled or killed job leaves `<storage>/<job-id>/chk-<n>/`
behind; `--from-checkpoint latest` picks the newest complete one (it has `_metadata`).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from pipelines.settings import ConfigError, Settings


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
    from pipelines.environment import checkpoint_dir

    root = _local_dir(checkpoint_dir(settings))
    found = [m.parent for m in root.glob("*/chk-*/_metadata")]
    return sorted(found, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1])))


def resolve_checkpoint(settings: Settings, wanted: str) -> str:
    if wanted != "latest":
        path = Path(urlparse(wanted).path)
        if urlparse(wanted).scheme in ("", "file") and not (path / "_metadata").is_file():
            raise ConfigError(
                f"--from-checkpoint {wanted}: no _metadata there; "
                f"not a complete checkpoint or savepoint"
            )
        return wanted
    found = retained_checkpoints(settings)
    if not found:
        from pipelines.environment import checkpoint_dir

        raise ConfigError(
            f"--from-checkpoint latest: no retained checkpoint under "
            f"{checkpoint_dir(settings)} (is checkpoint.retention `retain`?)"
        )
    return found[-1].as_uri()
