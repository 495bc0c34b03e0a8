"""What the topology configures, read without starting it: Flink's HA and S3 settings
carry no secret, every broker gets the replicated cluster's settings, and a fault trial's
verdict needs every check to hold."""

from __future__ import annotations

import json

import pytest

from pipelines.running import registry
from pipelines.settings import load_settings
from pipelines_dev.faults import Result, trial_values
from pipelines_dev.topology import REPLICATED, Topology

pytestmark = pytest.mark.unit


def test_flink_runs_with_zookeeper_ha_and_the_object_store_and_no_secret(tmp_path):
    props = Topology(name="t", state_dir=tmp_path).flink_properties("taskmanager-2")
    lines = dict(line.split(": ", 1) for line in props.splitlines())
    assert {k: lines[k] for k in (
        "high-availability.type",
        "high-availability.zookeeper.quorum",
        "high-availability.storageDir",
        "s3.endpoint",
        "s3.path.style.access",
        "taskmanager.host",
        "taskmanager.numberOfTaskSlots",
        "python.executable",
    )} == {
        "high-availability.type": "zookeeper",
        "high-availability.zookeeper.quorum": "zookeeper:2181",
        "high-availability.storageDir": "s3://flink/ha",
        "s3.endpoint": "http://seaweedfs:8333",
        "s3.path.style.access": "true",
        "taskmanager.host": "taskmanager-2",
        "taskmanager.numberOfTaskSlots": "2",
        "python.executable": "/opt/venv/bin/python",
    }  # fmt: skip
    assert not [k for k in lines if "secret" in k or "access-key" in k]


@pytest.mark.parametrize("job", registry.names())
def test_each_job_accepts_the_settings_that_point_it_at_the_topology(tmp_path, job):
    topology = Topology(name="t", state_dir=tmp_path)
    state = {"gateway": "172.30.0.1", "kafka_ports": [9101, 9102], "enrichment_port": 8088}
    topology.state_file.write_text(json.dumps(state))
    sets = topology.job_sets(job)
    loaded = load_settings(job, overrides=sets, sections=registry.load(job).sections)
    assert loaded.settings.kafka.bootstrap_servers == "172.30.0.1:9101,172.30.0.1:9102"
    assert ("demo_service.url=http://172.30.0.1:8088" in sets) == (job == "enrich")


def test_the_brokers_replicate_what_a_broker_loss_must_not_lose():
    assert {k: REPLICATED[k] for k in (
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "unclean.leader.election.enable",
    )} == {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "unclean.leader.election.enable": "false",
    }  # fmt: skip


def test_the_store_credentials_are_files_only_the_owner_reads(tmp_path):
    topology = Topology(name="t", state_dir=tmp_path)
    keys = topology._secrets()
    again = topology._secrets()  # generated once, kept
    assert keys == again and len(keys["secret"]) >= 40
    for name in ("s3-keys.json", "s3.json", "flink-s3.yaml"):
        assert (topology.secrets_dir / name).stat().st_mode & 0o777 == 0o600
    identities = json.loads((topology.secrets_dir / "s3.json").read_text())["identities"]
    assert identities[0]["credentials"] == [
        {"accessKey": keys["access"], "secretKey": keys["secret"]}
    ]


def test_trial_inputs_are_numbered_keyed_or_malformed_as_the_checks_expect():
    passthrough = trial_values("passthrough", 120, 0)
    assert [json.loads(v)["id"] for v, _ in passthrough] == list(range(120))
    assert passthrough[61] == (b'{"id": 61, "key": "k1", "seq": 1}', b"k1")
    enrich = trial_values("enrich", 1000, 500)
    bad = [i for i, (v, _) in enumerate(enrich) if v.startswith(b"{not")]
    assert bad == [499, 999] and all(key is None for _, key in enrich)


@pytest.mark.parametrize(
    "change",
    [
        {"lost": 1},
        {"duplicated": 1},
        {"order_violations": 1},
        {"aborted_reads": 1},
        {"open_transactions": True},
        {"dead_letters": 99},
        {"error": "the job is FAILED after the fault"},
    ],
)
def test_a_trial_passes_only_when_every_check_holds(change):
    fine = Result(
        "enrich", "jobmanager-kill", 1, 7, 50_000, dead_letters=100, dead_letters_expected=100
    )
    assert fine.ok
    assert not Result(**{**fine.__dict__, **change}).ok
