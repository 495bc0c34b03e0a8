"""Packaging a job for a cluster: a directory a cluster can run without this working tree.

The Python sources, the effective config with each secret as the reference it was loaded
from, the jars, and SUBMIT.sh (`flink run` to any JobManager).
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipelines.flink.distribution import submit_command
from pipelines.flink.gateway import QUIET_ENVIRONMENT_LOGS
from pipelines.host import jars as jar_module
from pipelines.host.paths import PACKAGE_MARKER, PROJECT_ROOT, state_root
from pipelines.running.registry import names
from pipelines.settings import ConfigError, Loaded, is_secret_key
from pipelines.settings.secrets import from_reference, url_passwords
from pipelines.settings.sections import dumped as dumped_settings


@dataclass(frozen=True)
class Requirement:
    """What a packaged config needs where SUBMIT.sh runs: an environment variable or a file
    (as its secret reference was written), and the setting it feeds."""

    kind: str  # "env" or "file"
    name: str
    key: str


def _reference_for(dotted: str, source: str) -> Requirement:
    """The reference a secret came from, as written (`${file:...}` stays a file); a secret
    written in clear becomes an environment variable named after its key, never a value."""
    match = re.search(r"-> (env|file) (.+)$", source)
    if match:
        return Requirement(match.group(1), match.group(2), dotted)
    match = re.search(r"^env (\w+)$", source)  # the environment layer: PIPELINES__...
    name = match.group(1) if match else "PIPELINES__" + dotted.upper().replace(".", "__")
    return Requirement("env", name, dotted)


def _secrets_as_references(
    tree: dict, loaded: Loaded, needs: list[Requirement], prefix: str = ""
) -> dict:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out[key] = _secrets_as_references(value, loaded, needs, dotted + ".")
        elif value is not None and (
            is_secret_key(dotted)
            or from_reference(loaded.sources.get(dotted, ""))
            or url_passwords(value)
        ):
            need = _reference_for(dotted, loaded.sources.get(dotted, ""))
            needs.append(need)
            out[key] = f"${{{need.kind}:{need.name}}}"
        else:
            out[key] = value
    return out


def effective_config(loaded: Loaded, needs: list[Requirement] | None = None) -> dict:
    """The settings as one YAML tree, each secret as the reference it was loaded from."""
    dumped = dumped_settings(loaded.settings, mode="json", exclude={"job": {"from_checkpoint"}})
    props = loaded.settings.kafka.properties
    dumped["kafka"]["properties"] = {k: v for k, v in props.items()}
    return _secrets_as_references(dumped, loaded, [] if needs is None else needs)


def _cluster_sources(job: str, src_pipelines: Path):
    """copytree's ignore: what a Flink cluster does not run stays behind: the Beam
    pipelines, the other jobs, caches (the developer tooling, pipelines_dev, is a package of
    its own beside this one and never copied)."""

    def ignore(directory: str, entries: list[str]) -> set[str]:
        skipped = {e for e in entries if e == "__pycache__" or e.endswith(".pyc")}
        here = Path(directory).resolve()
        if here == src_pipelines:
            skipped.add("beam")
        if here == src_pipelines / "jobs":
            skipped.update(f"{other}.py" for other in names(here) if other != job)
        return skipped

    src_pipelines = src_pipelines.resolve()
    return ignore


@dataclass(frozen=True)
class Package:
    root: Path
    job: str
    jars: list[Path]
    command: list[str]
    requirements: list["Requirement"]


def shippable(root: Path) -> None:
    """Make a tree that holds no secret readable by everyone: the CLI writes under umask
    077, and a package or an image context is code, config with secret *references*, jars
    and wheels, meant for other users and machines (the official Flink image runs its
    processes as `flink`, not as the owner of these files)."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o100
        path.chmod(0o755 if executable else 0o644)


def _clear_earlier_package(out_dir: Path) -> None:
    """Replace an earlier package; refuse anything else (it may be the user's own files),
    and refuse a package that holds state: packages before the state root moved out of
    them kept a submitted job's checkpoints in `.local/`."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not (out_dir / PACKAGE_MARKER).is_file():
            raise ConfigError(
                f"--out {out_dir}: not empty and not an earlier package (no "
                f"{PACKAGE_MARKER}); choose an empty or new directory"
            )
        if any((out_dir / ".local").glob("*points/*")):  # checkpoints/, savepoints/
            raise ConfigError(
                f"--out {out_dir}: the earlier package holds state in {out_dir / '.local'} "
                f"(checkpoints or savepoints of a submitted job); move it out (e.g. into "
                f"{state_root()}) before packaging again: nothing was replaced"
            )
        shutil.rmtree(out_dir)


DEFAULT_JOBMANAGER = "127.0.0.1:8081"


def package_job(
    loaded: Loaded,
    out_dir: Path,
    python: str | None,
    flink: str,
    jobmanager: str = DEFAULT_JOBMANAGER,
    src_root: Path = PROJECT_ROOT,
    client_python: str | None = None,
) -> Package:
    """Build `out_dir` (replaced whole) with everything a cluster needs for the job.

    SUBMIT.sh holds no path of this machine: the JobManager, the `flink` binary and the
    cluster's python come from its arguments or environment, defaults written in.
    `python` None: `python3` on the cluster's PATH. `Package.command` is the same
    submission with this machine's paths, for `pipelines-dev submit`; its client runs
    `client_python` (default: `python`), e.g. this venv where the TaskManagers run
    containers of their own.
    """
    job = loaded.settings.job.name
    jar_paths = jar_module.resolve()
    needs: list[Requirement] = []
    config = effective_config(loaded, needs)
    cluster_python = python or "python3"
    check_script_values(jobmanager, cluster_python, needs)  # before anything is written
    _clear_earlier_package(out_dir)
    shutil.copytree(
        src_root / "pipelines",
        out_dir / "pipelines",
        ignore=_cluster_sources(job, src_root / "pipelines"),
    )
    (out_dir / "conf" / "base").mkdir(parents=True)
    (out_dir / "conf" / "base" / f"{job}.yaml").write_text(
        f"# Effective config of {job}, written by `pipelines package`. Secrets are the\n"
        f"# references they were loaded from: README.md (REQUIREMENTS) lists what they need.\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    (out_dir / "jars").mkdir()
    shutil.copy(jar_module.MANIFEST, out_dir / "jars" / "manifest.txt")
    if jar_module.SRC_DIR.is_dir():
        shutil.copytree(jar_module.SRC_DIR, out_dir / "jars" / "src")
    (out_dir / "jars" / "lib").mkdir()
    packaged = []
    for jar in jar_paths:  # copied after src/, so the built jar is the newer one
        shutil.copy(jar, out_dir / "jars" / "lib" / jar.name)
        packaged.append(out_dir / "jars" / "lib" / jar.name)
    command = submit_command(
        f"pipelines.jobs.{job}",
        [],
        packaged,
        f"http://{jobmanager}",
        py_files=[out_dir],
        python=cluster_python,
        flink=flink,
        client_python=client_python,
    )
    (out_dir / "jars.txt").write_text("\n".join(p.name for p in packaged) + "\n")
    script = out_dir / "SUBMIT.sh"
    script.write_text(
        submit_script(job, [p.name for p in packaged], cluster_python, jobmanager, needs)
    )
    script.chmod(0o755)
    own = set(loaded.settings._sections)
    readme = package_readme(job, cluster_python, jobmanager, needs, own)
    (out_dir / "README.md").write_text(readme)
    (out_dir / PACKAGE_MARKER).write_text(
        "written by `pipelines package`; the next package into this directory replaces it\n"
    )
    shippable(out_dir)
    return Package(out_dir, job, packaged, command, needs)


def _requirement_lines(
    needs: list[Requirement], own: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """One line per need; a need of a job's own section is resolved on the TaskManagers too
    (its workers read it: pipelines.settings.sections)."""
    lines = []
    for need in needs:
        where = (
            "where SUBMIT.sh runs and on every TaskManager"
            if need.key.split(".")[0] in own
            else "where SUBMIT.sh runs"
        )
        if need.kind == "env":
            lines.append(f"environment variable {need.name}: {need.key} (set {where})")
        else:
            lines.append(f"file {need.name}: {need.key} (read {where})")
    return lines


# What may be written into SUBMIT.sh and a package's README: a value that could end a
# comment line or a quoted word (newlines, control characters, quotes) is refused before
# anything is written, and every value is also quoted where the script uses it.
_HOST_PORT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?:\d{1,5}")
_COMMAND = re.compile(r"[A-Za-z0-9_./+@%-]+")
_SAFE_TEXT = re.compile(r"[^\x00-\x1f\x7f\"'`$\\]+")


def check_script_values(jobmanager: str, python: str, needs: list[Requirement]) -> None:
    if not _HOST_PORT.fullmatch(jobmanager) or not 0 < int(jobmanager.rsplit(":", 1)[1]) < 65536:
        raise ConfigError(
            f"--jobmanager {jobmanager!r}: expected HOST:PORT (letters, digits, dots and "
            f"dashes, then a port), e.g. flink-jm:8081"
        )
    if not _COMMAND.fullmatch(python):
        raise ConfigError(
            f"--python {python!r}: expected a command or a path (letters, digits and "
            f"_ . / + @ % -), e.g. /usr/bin/python3.11"
        )
    for need in needs:
        if not _SAFE_TEXT.fullmatch(need.name):
            raise ConfigError(
                f"{need.key}: the secret reference {need.kind}:{need.name!r} cannot be written "
                f"into SUBMIT.sh (quotes, $, backslashes or control characters); rename it"
            )


def submit_script(
    job: str, jars: list[str], python: str, jobmanager: str, needs: list[Requirement]
) -> str:
    """SUBMIT.sh: `flink run` of this package, from any directory, to any JobManager."""
    check_script_values(jobmanager, python, needs)
    q = shlex.quote
    header = [
        "#!/usr/bin/env bash",
        f"# Submit the {job} job in this package to a Flink cluster with `flink run`.",
        "#",
        "# REQUIREMENTS (README.md has the same list):",
        *(f"#   {line}" for line in _requirement_lines(needs)),
        "#   a Flink 2.2 client: --flink PATH, or $FLINK_HOME/bin/flink, or `flink` on PATH",
        f"#   the JobManager: --jobmanager HOST:PORT, or $JOBMANAGER (default {jobmanager})",
        "#   Python 3.11 with apache-flink 2.2.1 on the client and every TaskManager:",
        f"#     --python PATH, or $PYTHON (default {python}); where the client's differs,",
        "#     --client-python PATH, or $CLIENT_PYTHON (default: the same)",
        "# Other arguments go to the job (e.g. --skip-preflight, --set key=value).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        # Defaults as single-quoted words of their own: no value is ever parsed as code.
        f"default_jobmanager={q(jobmanager)}",
        f"default_python={q(python)}",
        'jobmanager="${JOBMANAGER:-$default_jobmanager}"',
        'flink="${FLINK_HOME:+$FLINK_HOME/bin/flink}"',
        'flink="${flink:-flink}"',
        'python="${PYTHON:-$default_python}"',
        'client_python="${CLIENT_PYTHON:-}"',
        "while [ $# -gt 0 ]; do",
        '  case "$1" in',
        '    --jobmanager) jobmanager="$2"; shift 2 ;;',
        '    --flink) flink="$2"; shift 2 ;;',
        '    --python) python="$2"; shift 2 ;;',
        '    --client-python) client_python="$2"; shift 2 ;;',
        "    *) break ;;",
        "  esac",
        "done",
        "missing=0",
    ]
    for need in needs:
        if need.kind == "env":
            header.append(
                f'[ -n "${{{need.name}:-}}" ] || {{ echo "SUBMIT.sh: set {need.name} '
                f'({need.key})" >&2; missing=1; }}'
            )
        else:
            header.append(
                f"[ -r {q(need.name)} ] || {{ echo {q(f'SUBMIT.sh: no readable file {need.name} ({need.key})')} >&2; missing=1; }}"
            )
    header += [
        '[ "$missing" = 0 ] || exit 2',
        "# The client must import this package, not another copy of `pipelines`.",
        'export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"',
        'exec "$flink" run -m "$jobmanager" '
        + (f"--jarfile {q('jars/lib/' + jars[0])} " if jars else "")
        + '-pyexec "$python" -pyclientexec "${client_python:-$python}" '
        + f'--pyModule {q("pipelines.jobs." + job)} --pyFiles "$PWD" "$@"',
    ]
    return "\n".join(header) + "\n"


def package_readme(
    job: str,
    python: str,
    jobmanager: str,
    needs: list[Requirement],
    own: frozenset[str] | set[str] = frozenset(),
) -> str:
    lines = [
        f"# {job}, packaged by `pipelines package`",
        "",
        "Submit from any directory:",
        "",
        "    ./SUBMIT.sh [--jobmanager HOST:PORT] [--flink PATH] [--python PATH] [job arguments]",
        "",
        "## REQUIREMENTS",
        "",
        *(f"- {line}" for line in _requirement_lines(needs, own)),
        "- a Flink 2.2 client: `--flink PATH`, or `$FLINK_HOME/bin/flink`, or `flink` on PATH",
        f"- the JobManager's address: `--jobmanager HOST:PORT` or `$JOBMANAGER` (default {jobmanager})",
        "- Python 3.11 with `apache-flink==2.2.1` and the project's dependencies on the client and",
        f"  on every TaskManager: `--python PATH` or `$PYTHON` (default `{python}`)",
        "",
        f"`conf/base/{job}.yaml` is the effective config; each secret is the reference it was",
        "loaded from (`${env:NAME}` or `${file:PATH}`), resolved where SUBMIT.sh runs.",
        "",
        "`flink run` logs its Python process's whole environment (an `${env:}` secret",
        "included) at INFO, and a TaskManager logs its Python workers' environment (its own,",
        "where a job section's secrets are given) when they close: add these lines to the",
        "client's `log4j-cli.properties` and to the TaskManagers' `log4j.properties` and",
        "`log4j-console.properties`:",
        "",
        *(f"    {line}" for line in QUIET_ENVIRONMENT_LOGS.strip().splitlines()),
    ]
    return "\n".join(lines) + "\n"
