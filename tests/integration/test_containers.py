"""Containers built and run on this machine: the session broker's image, and the deploy image
(deploy/Dockerfile, the one deploy/kubernetes/enrich.yaml names) running the enrich job.

Everything here is reached through ports published on 127.0.0.1 or the session broker's
bridge network, which its fixture creates and removes. Skipped, with the reason, where no
Docker engine answers.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from pipelines_dev import containers
from pipelines_dev.demo import demo_values
from pipelines_dev.enrichment_service import Service, company_profile
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import ROOT, assert_dead_letters_are

pytestmark = pytest.mark.integration


def test_session_broker_runs_the_project_image_published_on_loopback_only(
    container_broker, kafka, names
):
    inspect = json.loads(containers.docker("inspect", container_broker.name))[0]
    assert inspect["Config"]["Image"] == containers.kafka_image()
    assert inspect["Config"]["Labels"][containers.OWNER_LABEL] == str(ROOT)
    bindings = inspect["HostConfig"]["PortBindings"]
    assert bindings == {
        f"{container_broker.port}/tcp": [
            {"HostIp": "127.0.0.1", "HostPort": str(container_broker.port)}
        ]
    }
    assert "Kafka version: 4.2.0" in containers.docker("logs", container_broker.name)
    create_topics(kafka, {names("in"): 2})
    values = [f"record-{i}".encode() for i in range(50)]
    produce(kafka, names("in"), values)
    assert sorted(read_all(kafka, names("in"))) == sorted(values)


def test_a_broker_start_that_fails_leaves_no_container_or_network(container_broker):
    broker = containers.ContainerBroker(port=free_ports())
    with pytest.raises(containers.DockerError, match="did not answer within 0s"):
        broker.start(wait_s=0.0)
    assert containers.docker("ps", "-aq", "--filter", f"name={broker.name}") == ""
    found = containers.docker("network", "ls", "-q", "--filter", f"name={broker.network_name}")
    assert found == ""


@pytest.fixture(scope="module")
def deploy_image(container_broker):
    started = time.monotonic()
    image = containers.build_enrich_deploy_image()
    print(f"\n[deploy image] {image} ready in {time.monotonic() - started:.0f}s")
    return image


class Containers:
    """`docker run -d` with this checkout's label; removes what it started at the end."""

    def __init__(self):
        self.names: list[str] = []

    def run(self, name_part: str, *args: str) -> str:
        name = f"pipelines-test-{name_part}-{uuid.uuid4().hex[:6]}"
        containers.docker(
            "run",
            "-d",
            "--init",
            "--name",
            name,
            "--label",
            f"{containers.OWNER_LABEL}={ROOT}",
            *args,
        )
        self.names.append(name)
        return name

    def remove(self) -> None:
        for name in self.names:
            containers.docker("rm", "-f", "-v", name, check=False)


@pytest.fixture
def started():
    owned = Containers()
    yield owned
    owned.remove()


def _state(name: str) -> dict:
    return json.loads(containers.docker("inspect", "--format", "{{json .State}}", name))


def test_deploy_image_runs_the_enrich_job_with_checkpoints_on_a_volume(
    container_broker, deploy_image, kafka, names, started, tmp_path
):
    total, bad_every = 900, 45
    values = demo_values(total, bad_every=bad_every)
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), values)
    net = ["--network", container_broker.network_name]

    # The demo enrichment service, in the same image, from this checkout's source (read-only).
    service_port = free_ports()
    enrichment = started.run(
        "enrichment",
        *net,
        "--network-alias",
        "enrichment",
        "-p",
        f"127.0.0.1:{service_port}:8080",
        "-v",
        f"{ROOT / 'pipelines'}:/src/pipelines:ro",
        "-v",
        f"{ROOT / 'pipelines_dev'}:/src/pipelines_dev:ro",
        "-w",  # `python -m` puts the working directory first on the path
        "/src",
        deploy_image,
        containers.DEPLOY_PYTHON,
        "-m",
        "pipelines_dev.enrichment_service",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "--latency",
        "20ms",
    )
    service = Service(port=service_port)
    deadline = time.monotonic() + 60
    while not service.healthy():
        assert time.monotonic() < deadline, "the enrichment container did not answer in 60s: " + (
            containers.docker("logs", "--tail", "20", enrichment, check=False)
        )
        time.sleep(0.3)

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    sets = {
        "kafka.bootstrap_servers": container_broker.network_bootstrap,
        "source.topics": f"[{names('in')}]",
        "source.group_id": names("group"),
        "sink.topic": names("out"),
        "sink.dead_letter_topic": names("dlq"),
        "sink.transactional_id_prefix": names("tx"),
        "demo_service.url": "http://enrichment:8080",
        "checkpoint.interval": "1s",
        "checkpoint.retention": "retain",
        "checkpoint.storage": "file:///checkpoints/{job}",
    }
    job = started.run(
        "enrich",
        *net,
        "-v",
        f"{checkpoints}:/checkpoints",
        deploy_image,
        *containers.deploy_command("enrich"),
        *(arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")),
    )

    def decoded(topic: str) -> list[dict]:
        return [json.loads(v) for v in read_all(kafka, names(topic), timeout_s=20)]

    def retained() -> list[Path]:
        return sorted(checkpoints.glob("enrich/*/chk-*/_metadata"))

    deadline = time.monotonic() + 300
    while True:
        state = _state(job)
        assert state["Running"], f"the job container exited {state['ExitCode']}:\n" + (
            containers.docker("logs", "--tail", "30", job, check=False)
        )
        out, dlq = decoded("out"), decoded("dlq")
        if len(out) + len(dlq) >= total and retained():
            break
        assert time.monotonic() < deadline, (
            f"after 300s: {len(out)} out, {len(dlq)} dead letters of {total}, "
            f"checkpoints {retained()}\n" + containers.docker("logs", "--tail", "30", job)
        )
        time.sleep(2)
    containers.docker("kill", "--signal", "INT", job)
    exit_code = containers.docker("wait", job, timeout=120)
    logs = containers.docker("logs", job)
    assert exit_code == "0", logs[-3000:]

    out, dlq = decoded("out"), decoded("dlq")
    valid_ids = sorted(json.loads(v)["id"] for v in values if v.startswith(b'{"id"'))
    print(f"input {total}, output {len(out)}, dead letters {len(dlq)}, retained {retained()}")
    assert sorted(r["id"] for r in out) == valid_ids  # each exactly once
    assert all(r["enrichment"] == company_profile(r["company"]) for r in out)
    assert_dead_letters_are([json.dumps(d) for d in dlq], names("in"), values, 3)
    assert retained(), "no checkpoint retained on the mounted volume"
