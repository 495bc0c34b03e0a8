"""`pipelines ...`: the one entry point for running, submitting, checking and local infra."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from pipelines.processes import ProcessGroups
from pipelines.runner import Failure, guarded, job_arguments, load_job, prepare, run_local
from pipelines.settings import effective_view, load_settings


def _job_parser(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("job", help="job name: a module in pipelines/jobs and conf/base/<job>.yaml")
    return job_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipelines", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = _job_parser(sub, "run", "run a job on a local Flink mini-cluster, with progress")
    run.add_argument("--savepoint-on-stop", action="store_true",
                     help="on Ctrl-C, stop with a savepoint instead of cancelling")
    submit = _job_parser(sub, "submit", "submit a job with `flink run` to the local standalone cluster")
    submit.add_argument("--detached", action="store_true", help="return once submitted")
    _job_parser(sub, "doctor", "validate the config and run the broker-aware preflight checks")
    package = _job_parser(sub, "package", "build what a cluster needs to run the job, print `flink run`")
    package.add_argument("--out", help="output directory (default: dist/<job>)")
    package.add_argument("--python", default=None,
                         help="python on the cluster (default: this venv's python)")

    new = sub.add_parser("new", help="create a job from an existing one: module, config, test")
    new.add_argument("name")
    new.add_argument("--from", dest="template", default="enrich",
                     choices=["enrich", "windowed", "passthrough"])
    new.add_argument("--root", default=None, help="project root to write into (default: this one)")

    config = sub.add_parser("config", help="inspect job configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    _job_parser(config_sub, "show", "print the effective config, secrets masked, with sources")

    demo = _job_parser(sub, "demo", "create the job's topics and produce demo records")
    demo.add_argument("--records", type=int, default=1000)
    demo.add_argument("--bad-every", type=int, default=100,
                      help="every Nth record is malformed (0: none)")
    demo.add_argument("--partitions", type=int, default=3)

    kafka = sub.add_parser("kafka", help="the local jar-run Kafka broker")
    kafka.add_argument("action", choices=["up", "down", "status", "transactions"])
    kafka.add_argument("tool_args", nargs=argparse.REMAINDER,
                       help="transactions: arguments for Kafka's kafka-transactions tool, "
                            "e.g. list | find-hanging --broker-id 1 | abort --topic T ...")
    kafka.add_argument("--transaction-max-timeout-ms", type=int,
                       help="broker transaction.max.timeout.ms (default: Kafka's 900000)")

    cluster = sub.add_parser("cluster", help="the local standalone Flink cluster")
    cluster.add_argument("action", choices=["up", "down", "status"])

    enrichment = sub.add_parser("enrichment", help="the local demo enrichment HTTP service")
    enrichment.add_argument("action", choices=["up", "down", "status"])
    enrichment.add_argument("--port", type=int, default=None)
    enrichment.add_argument("--latency", default="50ms", help="per lookup, e.g. 50ms")
    enrichment.add_argument("--failure-rate", type=float, default=0.0)

    sub.add_parser("jars", help="fetch pinned jars with mvn, verify sha256, build jars/src")

    offsets = sub.add_parser("offsets", help="a consumer group's committed offsets and lag")
    offsets.add_argument("--group", required=True)
    offsets.add_argument("--topic", action="append", default=[])
    offsets.add_argument("--bootstrap", default=None, help="default: the local broker")
    offsets.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS")
    offsets.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C must work however we were started: a program launched in the background of a
    # non-interactive shell inherits SIGINT as ignored. `run` installs richer handlers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args = build_parser().parse_args(argv)
    handler = HANDLERS[args.command]
    try:
        code = guarded(lambda: handler(args))
        sys.stdout.flush()
    except BrokenPipeError:  # `pipelines config show enrich | head`
        sys.stderr.close()
        return 0
    return code


def _run(args) -> int:
    load_job(args.job)
    result = run_local(args.job, args)
    return 0 if result.status in ("FINISHED", "CANCELED", "STOPPED") else 1


def _submit(args) -> int:
    """Package the job, then `flink run` the package: what the cluster runs is what a
    cluster elsewhere would get, not this working tree."""
    import subprocess

    from pipelines.devtools.flink_cluster import Cluster
    from pipelines.settings import PROJECT_ROOT
    from pipelines.templates import package_job

    loaded = prepare(args.job, args)
    cluster = Cluster()
    if not cluster.overview():
        raise Failure(f"no Flink cluster answers at {cluster.url}: start one with `make cluster-up`")
    package = package_job(loaded, PROJECT_ROOT / ".local" / "packages" / args.job,
                          python=sys.executable, flink=_flink(), rest_url=cluster.url)
    extra = ["--skip-preflight"]
    if args.from_checkpoint:
        extra += ["--from-checkpoint", args.from_checkpoint]
    command = package.command[:]
    if args.detached:
        command.insert(command.index("run") + 1, "--detached")
    env = {**cluster.environ(), "PYTHONPATH": str(package.root)}
    # `flink run` is a JVM that starts a Python client: both in a group we end on any exit.
    owner = ProcessGroups()
    try:
        proc = owner.popen(command + extra, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=package.root)
        stdout, stderr = proc.communicate()
    finally:
        owner.end()
    sys.stdout.write(stdout)
    if proc.returncode != 0:
        tail = [line for line in (stdout + stderr).splitlines() if line.strip()][-5:]
        raise Failure(f"flink run failed (exit {proc.returncode}): " + " | ".join(tail))
    return 0


def _flink() -> str:
    from pipelines.devtools.flink_cluster import flink_home

    return str(flink_home() / "bin" / "flink")


def _package(args) -> int:
    from pipelines.settings import PROJECT_ROOT
    from pipelines.templates import package_job

    args.skip_preflight = True
    loaded = prepare(args.job, args)
    out = Path(args.out) if args.out else PROJECT_ROOT / "dist" / args.job
    package = package_job(loaded, out.resolve(), python=args.python or sys.executable,
                          flink=_flink())
    print(f"packaged {args.job} into {package.root}")
    print(f"  sources  {package.root / 'pipelines'}")
    print(f"  config   {package.root / 'conf' / 'base' / (args.job + '.yaml')} (secrets as ${{env:...}})")
    for jar in package.jars:
        print(f"  jar      {jar}")
    print("submit with (from any directory):")
    print(f"  {package.root / 'SUBMIT.sh'}")
    print("which runs:")
    print("  PYTHONPATH=" + str(package.root) + " " + " ".join(package.command))
    return 0


def _new(args) -> int:
    from pipelines.settings import PROJECT_ROOT
    from pipelines.templates import new_job

    root = Path(args.root).resolve() if args.root else PROJECT_ROOT
    if not (root / "pipelines" / "jobs").is_dir() or not (root / "conf" / "base").is_dir():
        raise Failure(f"--root {args.root}: not a copy of this project (no pipelines/jobs/ "
                      f"and conf/base/ there)")
    created = new_job(args.name, args.template, root)
    for path in (created.module, created.config, created.test):
        print(f"created {path.relative_to(root)}")
    print(f"next: pipelines demo {args.name} && pipelines run {args.name}; "
          f"tests: pytest {created.test.relative_to(root)}")
    return 0


def _doctor(args) -> int:
    from pipelines.jars import resolve

    args.skip_preflight = False
    args.from_checkpoint = None
    prepare(args.job, args)
    resolve()
    print(f"{args.job}: config valid, preflight passed, jars present")
    return 0


def _config(args) -> int:
    loaded = load_settings(args.job, env=args.env, overrides=args.overrides, conf_dir=args.conf_dir)
    rows = effective_view(loaded)
    width = max(len(k) for k, _, _ in rows)
    vwidth = min(max(len(v) for _, v, _ in rows), 60)
    for key, value, source in rows:
        print(f"{key:<{width}}  {value:<{vwidth}}  # {source}")
    return 0


def _demo(args) -> int:
    from pipelines.devtools.demo import prepare_demo

    loaded = load_settings(args.job, env=args.env, overrides=args.overrides, conf_dir=args.conf_dir)
    prepare_demo(loaded.settings, records=args.records, bad_every=args.bad_every,
                 partitions=args.partitions)
    return 0


def _kafka(args) -> int:
    from pipelines.devtools.kafka_broker import Broker, BrokerError

    broker = Broker(transaction_max_timeout_ms=args.transaction_max_timeout_ms)
    try:
        if args.action == "up":
            broker.up()
        elif args.action == "down":
            broker.down()
        elif args.action == "transactions":
            return broker.transactions(args.tool_args)
        else:
            print(broker.status())
    except BrokerError as exc:
        raise Failure(str(exc)) from None
    return 0


def _cluster(args) -> int:
    from pipelines.devtools.flink_cluster import Cluster, ClusterError

    cluster = Cluster()
    try:
        {"up": cluster.up, "down": cluster.down,
         "status": lambda: print(cluster.status())}[args.action]()
    except ClusterError as exc:
        raise Failure(str(exc)) from None
    return 0


def _enrichment(args) -> int:
    from pipelines.devtools.enrichment_service import DEFAULT_PORT, Service, ServiceError
    from pipelines.settings import parse_duration_ms

    service = Service(port=args.port or DEFAULT_PORT)
    try:
        latency_ms = parse_duration_ms(args.latency)
    except ValueError as exc:
        raise Failure(f"--latency: {exc}") from None
    if not 0.0 <= args.failure_rate <= 1.0:
        raise Failure(f"--failure-rate: {args.failure_rate} is not between 0 and 1")
    try:
        if args.action == "up":
            service.up(latency_ms=latency_ms, failure_rate=args.failure_rate)
        elif args.action == "down":
            service.down()
        else:
            print(service.status())
    except ServiceError as exc:
        raise Failure(str(exc)) from None
    return 0


def _jars(args) -> int:
    from pipelines.jars import fetch

    fetch()
    return 0


def _offsets(args) -> int:
    from pipelines.offsets import OffsetWatcher

    bootstrap = args.bootstrap
    if bootstrap is None:
        from pipelines.devtools.kafka_broker import Broker

        bootstrap = Broker().bootstrap
    watcher = OffsetWatcher(bootstrap, args.group, args.topic)
    while True:
        rows = watcher.poll()
        if args.json:
            print(json.dumps([r.as_dict() for r in rows]), flush=True)
        else:
            print(watcher.table(rows), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)


HANDLERS = {
    "run": _run, "submit": _submit, "doctor": _doctor, "config": _config, "demo": _demo,
    "kafka": _kafka, "cluster": _cluster, "enrichment": _enrichment,
    "package": _package, "new": _new, "jars": _jars, "offsets": _offsets,
}


if __name__ == "__main__":
    sys.exit(main())
