"""`pipelines-dev ...`: the developer's command on a checkout. The job commands of
`pipelines` (pipelines/cli.py: run, doctor, config, package, jobs, offsets, jars, beam), and
the developer commands below them: the local infrastructure this checkout runs (a Kafka
broker and a Flink cluster from jars, the demo enrichment service, Prometheus, the topology
in containers), demo data, `submit` to a cluster, and `new` to create a job.

The developer tooling (pipelines_dev) depends on the runtime (pipelines), never the other
way (tests/unit/test_boundaries.py): a package ships without it, and `pipelines` on a
machine that runs jobs has only the job commands.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from pipelines import cli
from pipelines.flink.distribution import flink_binary
from pipelines.flink.environment import savepoint_dir, transactional_identity
from pipelines.flink.jobmanager import JobManager, JobManagerError, refuse_second_copy
from pipelines.host.paths import PROJECT_ROOT, local_state, state_root
from pipelines.running import registry
from pipelines.running.errors import Failure
from pipelines.running.loading import load, prepare
from pipelines.running.processes import ProcessGroups
from pipelines.running.progress import first_checkpoint_soon
from pipelines.running.stopping import StopSignals
from pipelines.settings import parse_duration_ms
from pipelines.settings.client_properties import java_client_properties
from pipelines.shipping.packaging import package_job
from pipelines_dev import containers, prometheus
from pipelines_dev.demo import prepare_demo
from pipelines_dev.enrichment_service import DEFAULT_PORT, Service, ServiceError
from pipelines_dev.flink_cluster import (
    Cluster,
    ClusterError,
    client_dirs,
    quiet_client_environment_log,
)
from pipelines_dev.kafka_broker import Broker, BrokerError
from pipelines_dev.s3 import S3Error
from pipelines_dev.scaffolding import new_job
from pipelines_dev.topics import ProduceError
from pipelines_dev.topology import Topology, TopologyError, ensure_images


def build_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser(__doc__, prog="pipelines-dev")
    sub = cli.subcommands(parser)
    submit = cli.job_parser(
        sub, "submit", "package a job and submit it with `flink run` (default: the local cluster)"
    )
    submit.add_argument("--detached", action="store_true", help="return once submitted")
    submit.add_argument(
        "--stop-on-exit",
        action="store_true",
        help="on Ctrl-C or SIGTERM, stop the job with a savepoint (default: it keeps running)",
    )
    submit.add_argument(
        "--jobmanager",
        metavar="HOST:PORT",
        help="the cluster's JobManager REST address (default: the local cluster's)",
    )
    submit.add_argument(
        "--python",
        help="python with this project's dependencies on the cluster's machines "
        "(default: this venv's)",
    )

    demo = cli.job_parser(sub, "demo", "create the job's topics and produce demo records")
    demo.add_argument("--records", type=int, default=1000)
    demo.add_argument(
        "--bad-every", type=int, default=100, help="every Nth record is malformed (0: none)"
    )
    demo.add_argument("--partitions", type=int, default=3)

    new = sub.add_parser("new", help="create a job from an existing one: module, config, test")
    new.add_argument("name")
    new.add_argument(
        "--from",
        dest="template",
        default="enrich",
        help=f"the job to copy (default: enrich; here: {', '.join(registry.names())})",
    )
    new.add_argument("--root", default=None, help="project root to write into (default: this one)")

    kafka = sub.add_parser("kafka", help="the local jar-run Kafka broker")
    kafka_actions = kafka.add_subparsers(dest="action", required=True)
    up = kafka_actions.add_parser("up", help="start it (once; a running broker is reused)")
    up.add_argument(
        "--secure",
        action="store_true",
        help="also a TLS listener (port+2) and a SASL_SSL SCRAM-SHA-512 one (port+3); the "
        "CA, certificates, truststores and user are made at start",
    )
    up.add_argument(
        "--transaction-max-timeout-ms",
        type=int,
        help="broker transaction.max.timeout.ms (default: Kafka's 900000)",
    )
    kafka_actions.add_parser("down", help="stop it")
    kafka_actions.add_parser("status", help="is it running, and where")
    transactions = kafka_actions.add_parser(
        "transactions", help="Kafka's own kafka-transactions tool (list, find-hanging, abort)"
    )
    transactions.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="a plaintext broker to ask (default: the local broker, or --job's)",
    )
    cli.job_config_arguments(
        transactions, "connect as this job does: its kafka settings (bootstrap, TLS, SASL)"
    )
    transactions.add_argument(
        "tool_args",
        nargs=argparse.REMAINDER,
        help="e.g. list | find-hanging --broker-id 1 | abort --topic T ...",
    )

    cluster = sub.add_parser("cluster", help="the local standalone Flink cluster")
    cluster.add_argument("action", choices=["up", "down", "status"])

    enrichment = sub.add_parser("enrichment", help="the local demo enrichment HTTP service")
    enrichment.add_argument("action", choices=["up", "down", "status"])
    enrichment.add_argument("--port", type=int, default=None)
    enrichment.add_argument("--latency", default="50ms", help="per lookup, e.g. 50ms")
    enrichment.add_argument("--failure-rate", type=float, default=0.0)

    prom = sub.add_parser(
        "prometheus",
        help="a local Prometheus (Debian's package) scraping local runs' Flink reporters "
        "and evaluating deploy/prometheus's alert rules",
    )
    prom.add_argument("action", choices=["install", "up", "down", "status"])
    prom.add_argument("--port", type=int, default=None, help=f"default {prometheus.DEFAULT_PORT}")

    topology = sub.add_parser(
        "topology",
        help="the production-shaped cluster in containers: 3 brokers, JobManager + 2 "
        "TaskManagers, ZooKeeper HA, S3 object store, enrichment service",
    )
    topology.add_argument("action", choices=["up", "down", "status", "sets"])
    topology.add_argument("job", nargs="?", help="sets: the job whose --set arguments to print")
    topology.add_argument(
        "--timeout", type=float, default=300.0, help="up: seconds to wait for health"
    )

    sub.add_parser(
        "schemas",
        help="fetch the schemas the tests check the manifests against (jars/schemas.txt)",
    )

    docker = sub.add_parser("docker", help="images built here, containers the tests started")
    docker.add_argument("action", choices=["build", "down"])
    docker.add_argument(
        "--if-available",
        action="store_true",
        help="build: where no Docker engine answers, say why in one line and succeed",
    )
    docker.add_argument(
        "--deploy", action="store_true", help="build: also the enrich job's deploy image"
    )
    docker.add_argument(
        "--topology",
        action="store_true",
        help="build: also the images of `pipelines-dev topology` (ZooKeeper, SeaweedFS, Flink)",
    )
    return parser


SUBMITTED = re.compile(r"Job has been submitted with JobID ([0-9a-f]{32})")


def _submit(args) -> int:
    """Package the job, then `flink run` the package: what the cluster runs is what a
    cluster elsewhere would get, not this working tree.

    Refused while a copy of the job (same transactional-id prefix) is active there. The
    client's output is streamed and the job id printed as soon as the cluster accepts it;
    Ctrl-C or SIGTERM ends the client, says that the job keeps running and how to stop it
    (or, with --stop-on-exit, stops it with a savepoint)."""
    local = Cluster()
    jm = JobManager(args.jobmanager or local.url.removeprefix("http://"))
    if not jm.answers():
        hint = "start one with `make cluster-up`" if not args.jobmanager else "is it running?"
        raise Failure(f"no Flink JobManager answers at {jm.url}: {hint}")
    loaded = prepare(registry.load(args.job), args)
    prefix = transactional_identity(loaded.settings)
    refuse_second_copy(jm, args.job, prefix)
    # A directory per submission: two submits of one job at once (two CI jobs, two
    # terminals) each replaced the other's package while its client read it. The cluster
    # has what it needs once the client is done (the client ships the sources and jars
    # with the job graph), so it goes when submit ends.
    packages = local_state("packages")
    packages.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{args.job}-", dir=packages))
    try:
        return _submit_package(args, local, jm, loaded, prefix, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _submit_package(args, local: Cluster, jm: JobManager, loaded, prefix: str, root: Path) -> int:
    import subprocess

    settings = loaded.settings
    package = package_job(
        loaded,
        root,
        python=args.python or sys.executable,
        flink=flink_binary(),
        jobmanager=jm.address,
        client_python=sys.executable,  # `flink run` runs here, whatever the cluster runs
    )
    extra = ["--skip-preflight"]
    if settings.job.from_checkpoint:  # resolved here (`latest`), where the state is
        extra += ["--from-checkpoint", settings.job.from_checkpoint]
        if args.accept_transaction_loss:
            extra.append("--accept-transaction-loss")
    command = package.command[:]
    if args.detached:
        command.insert(command.index("run") + 1, "--detached")
    # The client resolves the job's default state dirs: this checkout's, not the package's.
    env = {
        **local.environ(),
        "PYTHONPATH": str(package.root),
        "PIPELINES_STATE_DIR": str(state_root()),
    }
    if local.conf_dir.is_dir():
        quiet_client_environment_log(local.conf_dir)  # a conf written before this fix
    else:  # never started here: the wheel's own conf and lib, its log kept private
        env.pop("FLINK_LIB_DIR")
        env.update(client_dirs())
    # `flink run` is a JVM that starts a Python client: both in a group we end on any exit.
    owner = ProcessGroups()
    stops = StopSignals(owner).install()
    job_id, lines = None, []
    client_done = threading.Event()
    # The client JVM's temp files (its extracted RPC jar, 21 MB) are left behind when it is
    # ended: in a directory of the owner's, removed once the group is gone.
    scratch = owner.scratch_dir("pipelines-flink-client-")
    env["JVM_ARGS"] = f"{env.get('JVM_ARGS', '')} -Djava.io.tmpdir={scratch}".strip()
    try:
        proc = owner.popen(
            command + extra,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=package.root,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
            found = SUBMITTED.search(line)
            if found and job_id is None:
                job_id = found.group(1)
                print(f"job {args.job} submitted to {jm.url} as {job_id}", flush=True)
                if not args.detached:  # the client waits anyway: no checkpoint interval too
                    first_checkpoint_soon(jm.url, job_id, client_done)
        proc.wait()
    except KeyboardInterrupt as stop:  # StopRequested too (SIGTERM)
        owner.end(grace_s=2.0)
        stops.restore()
        return _client_stopped(args, jm, job_id, prefix, savepoint_dir(settings), stop)
    finally:
        client_done.set()
        owner.end()
        stops.restore()
    if proc.returncode != 0:
        # The job's own one-line error, when its client got that far; else the last lines.
        said = [line.strip() for line in lines if line.startswith("error: ")]
        tail = said[-1:] or [line.strip() for line in lines if line.strip()][-5:]
        raise Failure(f"flink run failed (exit {proc.returncode}): " + " | ".join(tail))
    return 0


def _client_stopped(args, jm, job_id, prefix, savepoints, stop) -> int:
    """The submitting client was stopped: the job itself runs on unless asked to stop."""
    why = getattr(stop, "signame", "SIGINT")
    if job_id is None:  # stopped before the id was printed: accepted or not, ask
        try:
            running = jm.running_copies(prefix)
        except JobManagerError:
            running = []
        if not running:
            print(f"submit: stopped ({why}) before {jm.url} accepted job {args.job}; nothing runs")
            return 130
        job_id = running[-1].id
    if args.stop_on_exit:
        print(f"submit: stopped ({why}); stopping job {job_id} with a savepoint", flush=True)
        try:
            location = jm.stop_with_savepoint(job_id, savepoints)
        except JobManagerError as exc:
            raise Failure(f"{exc}; stop it with: pipelines jobs stop {job_id}") from None
        print(f"savepoint written to {location}")
        print(f"resume with: pipelines-dev submit {args.job} --from-checkpoint {location}")
        return 0
    print(
        f"submit: the client stopped ({why}); job {job_id} keeps running at {jm.url}. Stop it "
        f"with: pipelines jobs stop {job_id} --jobmanager {jm.address}"
    )
    return 130


def _demo(args) -> int:
    loaded = load(cli.configured(args.job), args)
    try:
        prepare_demo(
            loaded.settings,
            records=args.records,
            bad_every=args.bad_every,
            partitions=args.partitions,
        )
    except ProduceError as exc:
        raise Failure(str(exc)) from None
    return 0


def _kafka(args) -> int:
    broker = Broker(
        transaction_max_timeout_ms=getattr(args, "transaction_max_timeout_ms", None),
        secure=getattr(args, "secure", False),
    )
    try:
        if args.action == "up":
            broker.up()
        elif args.action == "down":
            broker.down()
        elif args.action == "transactions":
            bootstrap, properties = args.bootstrap_server, None
            if args.job:
                kafka = load(cli.configured(args.job), args).settings.kafka
                bootstrap = bootstrap or kafka.bootstrap_servers
                properties = java_client_properties(kafka, shaded=False)
            return broker.transactions(args.tool_args, bootstrap=bootstrap, properties=properties)
        else:
            print(broker.status())
    except BrokerError as exc:
        raise Failure(str(exc)) from None
    return 0


def _cluster(args) -> int:
    cluster = Cluster()
    try:
        {"up": cluster.up, "down": cluster.down, "status": lambda: print(cluster.status())}[
            args.action
        ]()
    except ClusterError as exc:
        raise Failure(str(exc)) from None
    return 0


def _enrichment(args) -> int:
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


def _prometheus(args) -> int:
    server = prometheus.Prometheus(port=args.port or prometheus.DEFAULT_PORT)
    try:
        if args.action == "install":
            print(f"prom     {prometheus.install()}")
        elif args.action == "up":
            server.up()
        elif args.action == "down":
            server.down()
        else:
            print(server.status())
    except prometheus.PrometheusError as exc:
        raise Failure(str(exc)) from None
    return 0


def _docker(args) -> int:
    if args.action == "down":
        for what in containers.remove_owned():
            print(f"docker   removed {what}")
        return 0
    problem = containers.docker_problem()
    if problem:
        if args.if_available:
            print(f"docker   images not built: {problem} (container tests will be skipped)")
            return 0
        raise Failure(f"docker: {problem}")
    try:
        print(f"docker   base  {containers.ensure_base()}")
        print(f"docker   kafka {containers.ensure_kafka_image()}")
        if args.deploy:
            print(f"docker   deploy {containers.build_enrich_deploy_image()}")
        if args.topology:
            for role, image in ensure_images().items():
                if role != "kafka":
                    print(f"docker   {role} {image}")
    except containers.DockerError as exc:
        if args.if_available:  # the tests then skip the container tests, saying why
            print(f"docker   images not built: {exc}")
            return 0
        raise Failure(str(exc)) from None
    return 0


def _topology(args) -> int:
    """`up` returns once every part is healthy and prints where each is; `sets JOB` prints
    the arguments that point a job at it (`pipelines-dev submit JOB $(pipelines-dev topology sets
    JOB)`)."""
    topology = Topology()
    if args.action != "sets":
        problem = containers.docker_problem()
        if problem:
            raise Failure(f"topology: {problem}")
    try:
        if args.action == "up":
            state = topology.up(wait_s=args.timeout)
            took = state.get("started_s")
            print(
                f"topology {topology.name} up"
                + (f" in {took:.0f} s" if took is not None else " (already)")
                + f": {topology.summary()}"
            )
            print(
                f"submit:  pipelines-dev submit JOB --jobmanager {topology.jobmanager} "
                f"--python /opt/venv/bin/python $(pipelines-dev topology sets JOB)"
            )
        elif args.action == "down":
            removed = topology.down()
            print(f"topology {topology.name}: " + (", ".join(removed) or "nothing to remove"))
        elif args.action == "status":
            if not topology.state():
                print(f"topology {topology.name}: not up")
                return 1
            problems = topology.problems()
            print(f"topology {topology.name}: {topology.summary()}")
            for problem in problems:
                print(f"  unhealthy: {problem}")
            return 1 if problems else 0
        else:
            if not args.job:
                raise Failure(
                    "topology sets: name the job, e.g. `pipelines-dev topology sets enrich`"
                )
            if not topology.state():
                raise Failure("topology sets: the topology is not up (`pipelines-dev topology up`)")
            print(" ".join(f"--set {item}" for item in topology.job_sets(args.job)))
    except (TopologyError, containers.DockerError, S3Error) as exc:
        raise Failure(str(exc)) from None
    return 0


def _schemas(args) -> int:
    from pipelines_dev import schemas

    try:
        for path in schemas.fetch():
            print(f"ok       {path.relative_to(PROJECT_ROOT)}")
    except schemas.SchemaError as exc:
        raise Failure(str(exc)) from None
    return 0


def _new(args) -> int:
    root = Path(args.root).resolve() if args.root else PROJECT_ROOT
    if not (root / "pipelines" / "jobs").is_dir() or not (root / "conf" / "base").is_dir():
        raise Failure(
            f"--root {args.root}: not a copy of this project (no pipelines/jobs/ "
            f"and conf/base/ there)"
        )
    created = new_job(args.name, args.template, root)
    for path in created.files:
        print(f"created {path.relative_to(root)}")
    tests = " ".join(str(p.relative_to(root)) for p in created.files[2:])
    print(
        f"next: pipelines-dev demo {args.name} && pipelines run {args.name}; tests: pytest {tests}"
    )
    return 0


HANDLERS = {
    "new": _new,
    "topology": _topology,
    "submit": _submit,
    "demo": _demo,
    "kafka": _kafka,
    "cluster": _cluster,
    "enrichment": _enrichment,
    "prometheus": _prometheus,
    "docker": _docker,
    "schemas": _schemas,
}


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, build_parser(), {**cli.HANDLERS, **HANDLERS})


if __name__ == "__main__":
    sys.exit(main())
