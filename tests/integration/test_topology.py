"""The production-shaped cluster (`pipelines-dev topology`): 3 replicated brokers, a JobManager
with ZooKeeper HA and 2 TaskManagers, checkpoints and savepoints on SeaweedFS's S3, the
enrichment service, each a container. Brought up once for this module, as a user would,
and every job submitted to it with `pipelines-dev submit --jobmanager`; output read back from
the replicated brokers with read_committed."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
import uuid
from collections import Counter

import pytest

from pipelines.flink.jobmanager import JobManager
from pipelines_dev.containers import docker
from pipelines_dev.demo import demo_values
from pipelines_dev.faults import (
    ALL_FAULTS,
    Context,
    exited_by_themselves,
    frozen,
    run_trial,
    wait_taskmanagers,
)
from pipelines_dev.topics import create_topics, end_offsets, produce, read_all
from tests.support import assert_dead_letters_are, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.topology]

PYTHON = "/opt/venv/bin/python"  # the TaskManagers' venv


@pytest.fixture(scope="module")
def topology(container_broker, tmp_path_factory):
    """Up once for the module (its start time and memory printed), down afterwards."""
    from pipelines_dev.topology import Topology

    topo = Topology(
        name=f"pipelines-topo-{uuid.uuid4().hex[:6]}",
        state_dir=tmp_path_factory.mktemp("topology"),
    )
    started = time.monotonic()
    try:
        state = topo.up(wait_s=420)
        print(
            f"topology up in {time.monotonic() - started:.0f} s "
            f"(containers healthy {state['started_s']:.0f} s after the first started)"
        )
        yield topo
    finally:
        removed = topo.down()
        assert removed, "down removed nothing"


def sets(topology, job: str, names, *extra: str) -> list[str]:
    items = [
        *topology.job_sets(job),
        f"source.topics=[{names('in')}]",
        f"source.group_id={names('group')}",
        f"sink.topic={names('out')}",
        f"sink.transactional_id_prefix={names('tx')}",
        "checkpoint.interval=2s",
        *extra,
    ]
    return [arg for item in items for arg in ("--set", item)]


def submit(topology, job: str, *args: str, timeout: float = 420):
    return run_cli(
        "submit", job, "--jobmanager", topology.jobmanager, "--python", PYTHON, *args,
        timeout=timeout,
    )  # fmt: skip


def submitted_id(output: str) -> str:
    return re.search(r"Job has been submitted with JobID ([0-9a-f]{32})", output).group(1)


def wait_for(what: str, check, timeout_s: float = 300, every_s: float = 2, job=None):
    """Poll `check` until it returns something; with `job` (JobManager, id), fail at once,
    with Flink's root cause, if that job fails instead."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if job is not None:
            jm, job_id = job
            state = jm._call(f"/jobs/{job_id}")["state"]
            if state in ("FAILED", "CANCELED"):
                entries = jm._call(f"/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"]
                causes = (
                    re.findall(r"Caused by: [^\n]*", entries[-1]["stacktrace"]) if entries else []
                )
                raise AssertionError(f"{what}: job {job_id} {state}: {causes[-1:] or entries[:1]}")
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(every_s)


def test_up_is_healthy_replicated_and_within_its_budget(topology):
    assert topology.problems() == []
    info = topology.jobmanager_overview()
    assert (info["taskmanagers"], info["slots-total"]) == (2, 4)
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": topology.bootstrap})
    meta = admin.list_topics(timeout=10)
    assert len(meta.brokers) == 3
    resource = ConfigResource("broker", str(sorted(meta.brokers)[0]))
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert {
        key: config[key].value
        for key in (
            "default.replication.factor",
            "min.insync.replicas",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
        )
    } == {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }
    memory = topology.memory()
    total = sum(memory.values())
    print(
        "memory: "
        + ", ".join(f"{role} {used / 2**20:.0f} MiB" for role, used in sorted(memory.items()))
        + f"; total {total / 2**30:.2f} GiB"
    )
    assert total < 8 * 2**30, f"the topology uses {total / 2**30:.2f} GiB"


def test_every_published_port_is_on_loopback_or_the_topology_network(topology):
    from pipelines_dev.containers import docker

    gateway = topology.state()["gateway"]
    for role in topology.roles():
        ports = json.loads(
            docker(
                "inspect", "--format", "{{json .NetworkSettings.Ports}}", topology.container(role)
            )
        )
        for bindings in (ports or {}).values():
            for binding in bindings or []:
                assert binding["HostIp"] in ("127.0.0.1", gateway), (role, binding)


def test_the_store_secret_is_in_no_log_environment_argument_or_image(topology):
    """The S3 secret key reaches the containers as a mounted file only; Flink masks it
    when it logs its configuration."""
    from pipelines_dev.containers import docker

    secret = json.loads((topology.secrets_dir / "s3-keys.json").read_text())["secret"]
    assert (topology.secrets_dir / "s3-keys.json").stat().st_mode & 0o077 == 0
    for role in topology.roles():
        name = topology.container(role)
        assert secret not in topology.logs(role, lines=100_000), f"{role}: in its log"
        assert secret not in docker("inspect", name), f"{role}: in its env or arguments"
        image = docker("inspect", "--format", "{{.Config.Image}}", name)
        assert secret not in docker("history", "--no-trunc", image), f"{role}: in its image"
    logged = topology.logs("jobmanager", lines=100_000)
    assert "Loading configuration property: s3.secret-key, ******" in logged


def _reported(text: str, metric: str, job_id: str, operator: str) -> int:
    """The sum over subtasks of one operator metric of one job, from reporter output."""
    pattern = re.compile(
        rf"^flink_taskmanager_job_task_operator_{metric}\{{(.*)\}} (\S+)$", re.MULTILINE
    )
    return int(
        sum(
            float(value)
            for labels, value in pattern.findall(text)
            if f'job_id="{job_id}"' in labels and f'operator_name="{operator}"' in labels
        )
    )


def test_enrich_at_parallelism_4_over_6_partitions_with_checkpoints_in_the_store(topology, names):
    bootstrap = topology.bootstrap
    create_topics(bootstrap, {names("in"): 6, names("out"): 6, names("dlq"): 1})
    values = demo_values(1200, bad_every=60)
    produce(bootstrap, names("in"), values)
    proc = submit(
        topology,
        "enrich",
        *sets(topology, "enrich", names, "job.parallelism=4", f"sink.dead_letter_topic={names('dlq')}",
              "checkpoint.retention=retain"),
        "--detached",
    )  # fmt: skip
    job_id = submitted_id(proc.stdout)
    jm = JobManager(topology.jobmanager)
    valid = sorted(json.loads(v)["id"] for v in values if v.startswith(b'{"id"'))

    def done():
        out = read_all(bootstrap, names("out"))
        dlq = read_all(bootstrap, names("dlq"))
        checkpoints = jm._call(f"/jobs/{job_id}/checkpoints")["counts"]["completed"]
        return (out, dlq) if len(out) + len(dlq) >= len(values) and checkpoints else None

    out, dlq = wait_for("enrich output and a checkpoint", done, 420, job=(jm, job_id))
    vertices = jm._call(f"/jobs/{job_id}")["vertices"]
    # The TaskManagers' Prometheus reporters count what the broker holds (no restart here).
    reported = "".join(topology.metrics(f"taskmanager-{i}") for i in (1, 2))
    run_cli("jobs", "cancel", job_id, "--jobmanager", topology.jobmanager)
    records = [json.loads(v) for v in out]
    print(f"enrich: input {len(values)}, output {len(records)}, dead letters {len(dlq)}")
    assert {
        what: _reported(reported, metric, job_id, operator)
        for what, metric, operator in (
            ("in", "numRecordsOut", "Source:_kafka_source"),
            ("out", "numRecordsSend", "kafka_sink:_Writer"),
            ("dead letters", "numRecordsSend", "dead_letter_sink:_Writer"),
        )
    } == {"in": len(values), "out": len(records), "dead letters": len(dlq)}
    assert sorted(r["id"] for r in records) == valid  # each once
    assert_dead_letters_are(dlq, names("in"), values, 6)
    assert {v["name"].split(" ")[0]: v["parallelism"] for v in vertices}.get("Source:") == 4
    retained = topology.s3().keys("flink", f"checkpoints/enrich/{job_id}/")
    print(f"retained in the store: {[k for k in retained if k.endswith('_metadata')]}")
    assert any(re.fullmatch(rf"checkpoints/enrich/{job_id}/chk-\d+/_metadata", k) for k in retained)


def test_passthrough_copies_exactly_through_the_replicated_brokers(topology, names):
    bootstrap = topology.bootstrap
    create_topics(bootstrap, {names("in"): 3, names("out"): 3})
    values = [json.dumps({"id": i}).encode() for i in range(3000)]
    produce(bootstrap, names("in"), values)
    submit(topology, "passthrough", *sets(topology, "passthrough", names, "source.bounded=true"))
    out = read_all(bootstrap, names("out"))
    print(f"passthrough: input {len(values)}, output {len(out)}")
    assert sorted(out) == sorted(values)
    stable, end = (
        end_offsets(bootstrap, names("out"), "read_committed"),
        end_offsets(bootstrap, names("out")),
    )
    assert stable == end


def test_windowed_counts_exactly_on_the_cluster(topology, names):
    bootstrap = topology.bootstrap
    create_topics(bootstrap, {names("in"): 3, names("out"): 3, names("dlq"): 1, names("late"): 1})
    base = 1_700_000_000_000
    records = [{"id": i, "key": f"k{i % 4}", "ts": base + i * 100} for i in range(1000)]
    produce(bootstrap, names("in"), [json.dumps(r) for r in records])
    submit(
        topology,
        "windowed",
        *sets(topology, "windowed", names, "source.bounded=true", f"sink.dead_letter_topic={names('dlq')}",
             f"window.late_topic={names('late')}"),
    )  # fmt: skip
    expected = Counter((r["key"], base + (r["ts"] - base) // 10_000 * 10_000) for r in records)
    out = [json.loads(v) for v in read_all(bootstrap, names("out"))]
    print(f"windowed: input {len(records)}, windows {len(out)}")
    assert sorted((r["key"], r["window_start"], r["count"]) for r in out) == sorted(
        (key, start, n) for (key, start), n in expected.items()
    )  # a multiset: a window emitted twice fails


def test_preflight_warns_where_an_acknowledged_record_could_be_lost(topology, names):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": topology.bootstrap})
    risky = NewTopic(names("out"), 3, -1, config={"min.insync.replicas": "1"})
    single = NewTopic(names("dlq"), 1, 1)
    for future in admin.create_topics([risky, single], request_timeout=30).values():
        future.result(timeout=30)
    create_topics(topology.bootstrap, {names("in"): 3})
    job_sets = sets(topology, "passthrough", names, f"sink.dead_letter_topic={names('dlq')}")
    doctor = run_cli("doctor", "passthrough", *job_sets)
    warnings = [line for line in doctor.stdout.splitlines() if line.startswith("warning")]
    assert warnings == [
        f"warning: sink.topic: topic {names('out')!r} has min.insync.replicas=1: acks=all then "
        "waits for the leader alone, and a record only the leader had is lost when that broker "
        "fails; set min.insync.replicas=2 (with 3 replicas)",
        f"warning: sink.dead_letter_topic: topic {names('dlq')!r} has 1 replica on a cluster of "
        "3 brokers: its records are lost with that broker; create it with replication factor 3",
    ]


def test_the_cli_works_against_the_three_brokers(topology, names):
    job_sets = sets(topology, "passthrough", names)
    demo = run_cli("demo", "passthrough", *job_sets, "--records", "300", "--bad-every", "0")
    assert "error" not in demo.stdout + demo.stderr
    assert len(read_all(topology.bootstrap, names("in"))) == 300
    doctor = run_cli("doctor", "passthrough", *job_sets)
    assert "error" not in doctor.stdout + doctor.stderr and "warning" not in doctor.stdout
    offsets = run_cli("offsets", "--job", "passthrough", *job_sets)
    assert names("in") in offsets.stdout
    transactions = run_cli("kafka", "transactions", "--job", "passthrough", *job_sets, "list")
    assert transactions.returncode == 0, transactions.stderr


@pytest.fixture
def ready_topology(topology):
    """The module's topology, ready for a trial; started afresh (its logs kept) when an
    earlier test left it broken, so that one fault's damage fails one test, not the rest."""
    problems = topology.wait_ready(timeout_s=180)
    if problems:
        kept = topology.keep_logs()
        print(f"topology not ready ({'; '.join(problems)}); logs in {kept}; starting it afresh")
        topology.up(wait_s=420)  # an unhealthy topology is taken down first
    return topology


def test_a_broker_the_runtime_will_not_pause_is_frozen_by_sigstop_and_thawed(ready_topology):
    """The fault driver's second way to freeze (taken when `docker pause` is refused past
    its bound): every process of the container stopped for the body, running after it,
    and the brokers back in sync."""
    ctx = Context(ready_topology, "passthrough", "", {}, [], random.Random(0))
    name = ready_topology.container("kafka-3")

    def states() -> list[str]:
        rows = docker("top", name, "-eo", "pid,stat").splitlines()[1:]
        return [row.split()[1] for row in rows]

    with frozen(ctx, "kafka-3", 0, retry_s=-1):
        assert states() and all(s.startswith("T") for s in states()), states()
    assert not [s for s in states() if s.startswith("T")], states()
    assert "by SIGSTOP of its" in ctx.log[0] and ctx.log[-1].endswith("kafka-3 unpaused")
    assert ready_topology.wait_ready(timeout_s=180) == []


def test_a_taskmanager_that_exits_by_itself_is_started_again_and_the_trial_notes_it(
    ready_topology,
):
    """What a deployment does for a Flink process that ends itself (a fatal error in a
    task's exception handler, as the Kafka sink's FLINK-38790): Docker's restart policy
    starts it again, it registers with the JobManager, and the trial's notes name it. The
    process is killed from the host, not through Docker, which would be a manual stop."""
    ctx = Context(ready_topology, "passthrough", "", {}, [], random.Random(0))
    role = "taskmanager-2"
    before = ready_topology.restart_counts()
    gone = tuple(i for i in ready_topology.taskmanager_ids() or [] if i.startswith(f"{role}:"))
    assert gone, ready_topology.taskmanager_ids()
    pid = int(docker("inspect", "--format", "{{.State.Pid}}", ready_topology.container(role)))
    os.kill(pid, signal.SIGKILL)
    wait_taskmanagers(ctx, gone=gone)
    assert exited_by_themselves(ctx, before) == {role: 1}
    assert f"{role} exited by itself 1 time(s) and its restart policy started it" in ctx.log[-1]
    assert ready_topology.wait_ready(timeout_s=180) == []


@pytest.mark.parametrize("fault", list(ALL_FAULTS))
def test_exactly_once_through_each_fault(ready_topology, fault, tmp_path_factory):
    """The fault suite's smoke (`make chaos` runs the full matrix): passthrough under load,
    the fault injected once a checkpoint completed and a fifth of the output is there;
    then every id once, per-key order kept, no aborted record ever read, no transaction
    left open (pipelines_dev.faults)."""
    exactly_once_through(ready_topology, "passthrough", fault, tmp_path_factory)


def test_the_flowing_enrichment_is_exactly_once_through_a_taskmanager_kill(
    ready_topology, tmp_path_factory
):
    """The enrich job's flowing stage (lookups in flight across batches, drained before
    each barrier, no state) in the smoke: a TaskManager killed while lookups are in flight,
    the job restored from its checkpoint in the store, every id once."""
    exactly_once_through(ready_topology, "enrich", "taskmanager-kill", tmp_path_factory)


def exactly_once_through(ready_topology, job: str, fault: str, tmp_path_factory) -> None:
    seed = random.randrange(1 << 31)
    # The combination's three faults take a minute or more: its input lasts that long, so
    # that its later faults too land while records are in flight (its notes show the output
    # at each one). The coordinator kill first lists the open transactions with Kafka's own
    # tool, a JVM: on a busy machine that took longer than the 20 s of input at 150/s, and
    # it found none open (CI: "no open transaction of the sink found within 60 s").
    slow = {"combination", "coordinator-kill"}
    rate = 30.0 if fault in slow else 150.0
    kept = tmp_path_factory.mktemp(f"trial-{job}-{fault}")  # the logs of a trial that fails
    result = run_trial(ready_topology, job, fault, 3000, seed, rate=rate,
                       deadline_s=420, keep_dir=kept)  # fmt: skip
    print(
        f"[{job} {fault}] seed {seed}: output {result.output}, lost {result.lost}, duplicated "
        f"{result.duplicated}, order violations {result.order_violations}, aborted reads "
        f"{result.aborted_reads}, recovery {result.recovery_s} s, restarts {result.restarts}, "
        f"exited by themselves {result.exited or 'none'}"
    )
    for event in result.events:
        print(f"    {event}")
    if result.kept:
        print(f"    logs and job state kept in {result.kept}")
    assert result.error is None, result.error
    assert (result.lost, result.duplicated, result.order_violations, result.aborted_reads) == (
        0,
        0,
        0,
        0,
    )
    assert not result.open_transactions
    assert any("healed" in event for event in result.events)
    # What the topology's HA and store give, checked inside the faults (a ChaosError
    # otherwise): the same job restored from its latest checkpoint by a new JobManager;
    # a rescale restored only from savepoints in the store.
    if fault == "jobmanager-kill":
        assert any("recovered by the new JobManager from checkpoint" in e for e in result.events)
    if fault == "rescale":
        assert sum("resumed at parallelism" in e for e in result.events) == 2


def test_memory_after_the_jobs_stays_within_the_budget(topology):
    """Run last in this module: after every job above ran on it."""
    memory = topology.memory()
    total = sum(memory.values())
    print(f"memory after the jobs: {total / 2**30:.2f} GiB ({len(memory)} containers)")
    assert len(memory) == 9
    assert total < 8 * 2**30
