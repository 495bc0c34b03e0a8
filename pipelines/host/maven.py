"""Resolving a pom's runtime closure with mvn: the local Kafka broker's and Beam's Java
side are both sets of jars from Maven Central, copied into a directory once per pom."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def copy_dependencies(pom: Path, out_dir: Path) -> str | None:
    """Copy `pom`'s runtime closure into `out_dir` (its old jars removed first); None on
    success, else mvn's last lines (or why mvn could not run) in one line. A marker
    holding the pom's text makes a second call with the same pom free."""
    marker = out_dir / ".complete"
    if marker.is_file() and marker.read_text() == pom.read_text():
        return None
    if shutil.which("mvn") is None:
        return "mvn is not on PATH"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.jar"):
        old.unlink()
    result = subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out_dir}",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return " | ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
    marker.write_text(pom.read_text())
    return None


def is_resolved(pom: Path, out_dir: Path) -> bool:
    marker = out_dir / ".complete"
    return marker.is_file() and marker.read_text() == pom.read_text()
