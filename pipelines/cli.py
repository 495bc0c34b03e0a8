"""`pipelines ...`: the job commands: running, checking, packaging jobs, and what a machine
that runs them needs (jars, offsets, the jobs on a JobManager).

This is the runtime's command. A developer's checkout also has `pipelines-dev`
(pipelines_dev/commands.py): these commands plus the local infrastructure (broker, cluster,
demo service, demo data, topology), `submit` and `new`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from pipelines.flink.distribution import flink_binary
from pipelines.flink.jobmanager import DEFAULT_JOBMANAGER, JobManager
from pipelines.host.jars import fetch, resolve
from pipelines.host.paths import LOCAL_DIR, PROJECT_ROOT
from pipelines.kafka.clients import local_bootstrap
from pipelines.kafka.offsets import OffsetWatcher
from pipelines.running import registry
from pipelines.running.errors import Failure, guarded
from pipelines.running.loading import job_arguments, load, prepare
from pipelines.running.logs import install_cli_handler
from pipelines.running.runner import check_local, run_local
from pipelines.settings import SecretMask, effective_view
from pipelines.settings.client_properties import librdkafka_config
from pipelines.shipping.packaging import package_job
from pipelines.warm_start import ensure_class_archive


def seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse turns the error into one line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds greater than 0")
    return value


def job_parser(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument(
        "job",
        help="job name: a module in pipelines/jobs and conf/base/<job>.yaml "
        f"(here: {', '.join(registry.names())})",
    )
    return job_arguments(parser)


def job_config_arguments(parser: argparse.ArgumentParser, job_help: str) -> None:
    """--job (optional) with --env and --set as for `run`: for commands that can connect
    as a job does; `load(args.job, args)` reads them."""
    parser.add_argument("--job", help=f"{job_help} (--env and --set as for `run`)")
    parser.add_argument("--env", help="config overlay for --job: conf/<env>/<job>.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.set_defaults(conf_dir=None)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors as one line (the usage stays behind --help), and
    its subcommand registry kept for pipelines_dev/commands.py to add to."""

    subcommands: Any = None

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser(description: str = __doc__, prog: str = "pipelines") -> Parser:
    parser = Parser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub

    run = job_parser(sub, "run", "run a job on a local Flink mini-cluster, with progress")
    run.add_argument(
        "--savepoint-on-stop",
        action="store_true",
        help="on Ctrl-C, stop with a savepoint instead of cancelling",
    )
    job_parser(sub, "doctor", "validate the config and run the broker-aware preflight checks")
    package = job_parser(
        sub, "package", "build what a cluster needs to run the job, print `flink run`"
    )
    package.add_argument("--out", help="output directory (default: dist/<job>)")
    package.add_argument(
        "--python",
        default=None,
        help="python on the cluster, written into SUBMIT.sh as the default of $PYTHON "
        "(default: python3 on the cluster's PATH)",
    )
    package.add_argument(
        "--jobmanager",
        default=None,
        help="the JobManager SUBMIT.sh submits to unless given another (default: 127.0.0.1:8081)",
    )

    config = sub.add_parser("config", help="inspect job configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    job_parser(config_sub, "show", "print the effective config, secrets masked, with sources")

    sub.add_parser(
        "jars",
        help="fetch pinned jars with mvn, verify sha256, build jars/src and the gateway "
        "JVM's class archive",
    )

    beam = sub.add_parser("beam", help="the Beam pipelines (pipelines/beam): run, or set up")
    beam_sub = beam.add_subparsers(dest="beam_command", required=True)
    job_parser(beam_sub, "run", "run a Beam pipeline locally (Prism or DirectRunner)")
    beam_sub.add_parser("setup", help="resolve Beam's Java side (mvn) and build Prism (go)")

    flink_jobs = sub.add_parser(
        "jobs", help="jobs on a Flink JobManager: list, stop with a savepoint, cancel"
    )
    flink_jobs.add_argument("action", nargs="?", default="list", choices=["list", "stop", "cancel"])
    flink_jobs.add_argument(
        "job",
        nargs="?",
        help="stop/cancel: a job id, or a running job's name or transactional-id prefix",
    )
    flink_jobs.add_argument(
        "--jobmanager", metavar="HOST:PORT", help="default: the local cluster's (127.0.0.1:8081)"
    )
    flink_jobs.add_argument(
        "--savepoint-dir", help="stop: where the savepoint goes (default: the job's config's)"
    )

    offsets = sub.add_parser("offsets", help="a consumer group's committed offsets and lag")
    job_config_arguments(
        offsets, "take the broker (with its TLS and SASL), group and topics from this job's config"
    )
    offsets.add_argument("--group", help="required without --job")
    offsets.add_argument("--topic", action="append", default=[])
    offsets.add_argument("--bootstrap", default=None, help="default: the local broker")
    offsets.add_argument(
        "--watch", type=seconds, metavar="SECONDS", help="refresh every SECONDS (> 0)"
    )
    offsets.add_argument("--json", action="store_true")
    return parser


def private_files() -> None:
    """Everything this command and what it starts write (checkpoints, logs with records
    in them, converted stores, broker data, packages) is readable by this user only:
    umask 077, inherited by the JVMs and Python workers. `.local/` itself is 0700."""
    import os

    os.umask(0o077)
    try:
        if LOCAL_DIR.is_dir():
            LOCAL_DIR.chmod(0o700)
    except PermissionError:  # another user's checkout: leave it as it is
        pass


# `pipelines-dev`'s own commands (pipelines_dev/commands.py): named here only to point at it.
DEVELOPER_COMMANDS = (
    "new",
    "demo",
    "submit",
    "kafka",
    "cluster",
    "enrichment",
    "prometheus",
    "docker",
    "schemas",
    "topology",
)


def refused_developer_command(argv: list[str]) -> str | None:
    """The one line `pipelines <developer command>` answers: the runtime's command has the
    job commands only; the local infrastructure, `submit` and `new` are `pipelines-dev`'s."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first not in DEVELOPER_COMMANDS:
        return None
    return (
        f"error: `pipelines {first}` is a developer command: run `pipelines-dev {first} ...` "
        f"in a checkout of this project (`pipelines` has the job commands only: "
        f"{', '.join(sorted(HANDLERS))})"
    )


def subcommands(parser: Parser):
    """The parser's subcommand registry, for pipelines_dev/commands.py to add to."""
    return parser.subcommands


def main(
    argv: list[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    handlers: dict | None = None,
) -> int:
    # Ctrl-C must work however we were started: a program launched in the background of a
    # non-interactive shell inherits SIGINT as ignored. `run` installs richer handlers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    private_files()
    install_cli_handler()
    if parser is None and (
        refused := refused_developer_command(sys.argv[1:] if argv is None else argv)
    ):
        print(refused, file=sys.stderr)
        return 2
    args = (parser or build_parser()).parse_args(argv)
    args.mask = SecretMask()  # learns each config's secrets as it is loaded (loading.load)
    handler = (handlers or HANDLERS)[args.command]
    try:
        code = guarded(lambda: handler(args), args.mask)
        sys.stdout.flush()
    except BrokenPipeError:  # `pipelines config show enrich | head`
        sys.stderr.close()
        return 0
    if getattr(args, "exit_at_once", False):
        exit_at_once(code)
    return code


def exit_at_once(code: int) -> NoReturn:
    """End the process now, its output flushed, without the interpreter's teardown. A Beam
    run leaves Beam's SDK harness threads behind (daemon threads it does not stop), still
    holding Kafka clients and gRPC channels: the teardown destroying those objects under
    them crashed the process on its way out (SIGSEGV, or glibc aborting on a corrupt heap)
    after the run had ended cleanly."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def configured(name: str):
    """What a command that reads a job's config loads: the job by that name (its own
    sections with it), or, for a Beam pipeline's config, the name alone."""
    return registry.load(name) if name in registry.names() else name


def _run(args) -> int:
    result = run_local(registry.load(args.job), args)
    return 0 if result.status in ("FINISHED", "CANCELED", "STOPPED") else 1


def _package(args) -> int:
    args.skip_preflight = True
    loaded = prepare(registry.load(args.job), args)
    out = Path(args.out) if args.out else PROJECT_ROOT / "dist" / args.job
    package = package_job(
        loaded,
        out.resolve(),
        python=args.python,
        flink=flink_binary(),
        jobmanager=args.jobmanager or DEFAULT_JOBMANAGER,
    )
    print(f"packaged {args.job} into {package.root}")
    print(f"  sources  {package.root / 'pipelines'}")
    print(f"  config   {package.root / 'conf' / 'base' / (args.job + '.yaml')}")
    for jar in package.jars:
        print(f"  jar      {jar}")
    for need in package.requirements:
        print(f"  needs    {need.kind} {need.name} ({need.key})")
    print("submit with (from any directory; README.md there lists what it needs):")
    print(f"  {package.root / 'SUBMIT.sh'} [--jobmanager HOST:PORT] [--flink PATH] [job arguments]")
    return 0


def _doctor(args) -> int:
    args.skip_preflight = False
    args.from_checkpoint = None
    check_local(registry.load(args.job), args)
    resolve()
    print(f"{args.job}: config valid, preflight passed, jars present, job builds")
    return 0


def _config(args) -> int:
    loaded = load(configured(args.job), args)
    rows = effective_view(loaded)
    width = max(len(k) for k, _, _ in rows)
    vwidth = min(max(len(v) for _, v, _ in rows), 60)
    for key, value, source in rows:
        print(f"{key:<{width}}  {value:<{vwidth}}  # {source}")
    return 0


def _jars(args) -> int:
    fetch()
    ensure_class_archive()  # the gateway JVM's, built where missing
    return 0


def _offsets(args) -> int:
    broker, group, topics = args.bootstrap or local_bootstrap(), args.group, args.topic
    if args.job:
        settings = load(configured(args.job), args).settings
        broker = librdkafka_config(settings.kafka)  # TLS and SASL as the job connects
        if args.bootstrap:
            broker["bootstrap.servers"] = args.bootstrap
        group = group or settings.source.group_id
        topics = topics or settings.source.topics
    if not group:
        raise Failure("offsets: give --group, or --job for a job whose config names one")
    watcher = OffsetWatcher(broker, group, topics)
    while True:
        rows = watcher.poll()
        if args.json:
            print(json.dumps([r.as_dict() for r in rows]), flush=True)
        else:
            print(watcher.table(rows), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)


def _jobs(args) -> int:
    from datetime import datetime

    jm = JobManager(args.jobmanager or DEFAULT_JOBMANAGER)
    if args.action == "list":
        jobs = jm.jobs()
        if not jobs:
            print(f"no jobs at {jm.url}")
        for job in jobs:
            started = datetime.fromtimestamp(job.start_time / 1000).strftime("%Y-%m-%d %H:%M:%S")
            prefix = f"  prefix {job.prefix}" if job.prefix else ""
            print(f"{job.id}  {job.state:<11} {started}  {job.name}{prefix}")
        return 0
    if not args.job:
        raise Failure(f"jobs {args.action}: give a job id or name (`pipelines jobs` lists them)")
    job = jm.find(args.job)
    if not job.active:
        raise Failure(
            f"job {job.name} ({job.id}) is {job.state} at {jm.url}: nothing to {args.action}"
        )
    if args.action == "cancel":
        state = jm.cancel(job.id)
        print(f"job {job.name} ({job.id}) {state.lower()}; its retained checkpoints stay")
        return 0
    location = jm.stop_with_savepoint(job.id, args.savepoint_dir or job.savepoint_dir)
    print(f"job {job.name} ({job.id}) stopped")
    print(f"savepoint written to {location}")
    name = job.job or job.name
    print(f"resume with: pipelines-dev submit {name} --from-checkpoint {location}")
    return 0


def _beam(args) -> int:
    # lazy: a package leaves pipelines/beam out, and it ships this module
    from pipelines.beam.java import BeamSetupError, ensure_java, ensure_prism
    from pipelines.beam.run import run

    if args.beam_command == "setup":
        try:
            jars = ensure_java()
            prism = ensure_prism()
        except BeamSetupError as exc:
            raise Failure(str(exc)) from None
        print(f"beam     {len(jars)} jars checked, Prism at {prism}")
        return 0

    args.exit_at_once = True  # main ends the process once this returns (exit_at_once)
    return run(args.job, args)


HANDLERS = {
    "beam": _beam,
    "run": _run,
    "doctor": _doctor,
    "config": _config,
    "package": _package,
    "jars": _jars,
    "offsets": _offsets,
    "jobs": _jobs,
}


if __name__ == "__main__":
    sys.exit(main())
