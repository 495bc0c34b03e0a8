"""The Flink distribution inside the PyFlink wheel, and the `flink run` command line that
submits a job module to a cluster. Used by `pipelines package` (the command it writes into
SUBMIT.sh) and by the local cluster's `pipelines-dev submit`."""

from __future__ import annotations

import sys
from pathlib import Path


def flink_home() -> Path:
    """The wheel's Flink distribution: bin/flink, bin/start-cluster.sh, lib/, opt/."""
    import pyflink

    return Path(pyflink.__file__).parent


def flink_binary() -> str:
    return str(flink_home() / "bin" / "flink")


def submit_command(
    module: str,
    job_args: list[str],
    jar_paths: list[Path],
    url: str,
    detached: bool = False,
    parallelism: int | None = None,
    py_files: list[Path] | None = None,
    extra: list[str] | None = None,
    python: str | None = None,
    flink: str | None = None,
    client_python: str | None = None,
) -> list[str]:
    """`flink run` of a Python job: `python` runs its operators on the TaskManagers,
    `client_python` (default: the same) builds the job graph where `flink run` runs."""
    python = python or sys.executable
    cmd = [flink or flink_binary(), "run", "-m", url.removeprefix("http://")]
    if detached:
        cmd.append("--detached")
    if parallelism:
        cmd += ["-p", str(parallelism)]
    # One --jarfile is allowed; the job also names every jar in pipeline.jars, which the
    # client ships with the job graph.
    if jar_paths:
        cmd += ["--jarfile", str(jar_paths[0])]
    cmd += ["-pyexec", python, "-pyclientexec", client_python or python, "--pyModule", module]
    if py_files:
        cmd += ["--pyFiles", ",".join(str(p) for p in py_files)]
    cmd += list(extra or [])
    return cmd + list(job_args)
