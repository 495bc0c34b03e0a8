"""A canary secret is found only where it belongs.

Canary values for the SASL password (`${file:}`), the truststore password (`${env:}`, a JKS
store that the CLI converts for librdkafka with keytool) and a librdkafka OAUTHBEARER config
(`--set key=${env:}`), all given through a conf/local layer and `--set`, unique to this run.
Every command that takes a job config runs against the secure broker with them: doctor,
demo, offsets, kafka transactions, run of each job, package, submit, beam run and docker
build --deploy. Then the test looks, rather than trusts: command lines of every process on
the machine (sampled while the commands run), the Flink REST API's config endpoints, every
file under .local/ written during the test and the secure broker's files (logs included),
the package directory, each layer of the deploy image (`docker save`: those the build
made unpacked, those it reused from before the canaries existed proven so by digest), and
every function PyFlink and Beam pickled into a job graph (recorded by canary/sitecustomize.py).

Allowed: the secret files themselves, the converted stores (0600, in a 0700 directory).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import time

import pytest
import yaml

from pipelines.host.paths import LOCAL_DIR, PROJECT_ROOT
from pipelines_dev.kafka_broker import Broker
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.integration.secret_search import (
    CANARY_DIR,
    ImageLayers,
    Sampler,
    decoded,
    hits,
    image_files,
    image_layers,
    layers_present,
    rest_configs,
)
from tests.support import job_env, run_cli

pytestmark = pytest.mark.integration

USER = "canary"


class Canaries:
    def __init__(self):
        tag = secrets.token_hex(6)
        self.sasl = f"canarySASL{tag}"
        self.store = f"canarySTORE{tag}"
        self.oauth = f"canaryOAUTH{tag}"

    def all(self) -> dict[str, bytes]:
        return {name: value.encode() for name, value in vars(self).items()}


@pytest.fixture(scope="module")
def canary(tmp_path_factory, flink_cluster):
    """The secure broker with a user whose password is a canary, a JKS truststore whose
    password is another, a conf dir whose conf/local layer refers to both, and the
    environment every command gets."""
    root = tmp_path_factory.mktemp("canary")
    broker = Broker(state_dir=root / "broker", port=free_ports(4), secure=True)
    broker.up()
    values = Canaries()
    secret_dir = root / "secrets"
    secret_dir.mkdir(mode=0o700)
    password_file = secret_dir / "kafka-password"
    password_file.write_text(values.sasl)
    password_file.chmod(0o600)
    broker.add_scram_user(USER, values.sasl)
    truststore = secret_dir / "truststore.jks"
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(broker.tls.ca_pem),
         "-keystore", str(truststore), "-storetype", "JKS", "-storepass:env", "CANARY_TRUST_PW"],
        env={**os.environ, "CANARY_TRUST_PW": values.store},
        check=True,
        capture_output=True,
    )  # fmt: skip
    conf = root / "conf"
    shutil.copytree(PROJECT_ROOT / "conf", conf)
    security = {
        "kafka": {
            "bootstrap_servers": broker.sasl_ssl_bootstrap,
            "security": {
                "protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "username": USER,
                "password": f"${{file:{password_file}}}",
                "ssl_truststore_location": str(truststore),
                "ssl_truststore_password": "${env:CANARY_TRUST_PW}",
            },
        }
    }
    for job in ("passthrough", "enrich", "windowed"):
        (conf / "local" / f"{job}.yaml").write_text(yaml.safe_dump(security))
    pickles = root / "pickles"
    pickles.mkdir()
    env = job_env(
        {
            "PIPELINES_CONF_DIR": str(conf),
            "CANARY_TRUST_PW": values.store,
            "CANARY_OAUTH": f"principal={values.oauth}",
            "CANARY_PICKLES": str(pickles),
        }
    )
    env["PYTHONPATH"] = f"{CANARY_DIR}:{env['PYTHONPATH']}"
    sampler = Sampler(values.all())
    sampler.start()
    started = time.time()
    try:
        yield {
            "values": values,
            "broker": broker,
            "conf": conf,
            "env": env,
            "pickles": pickles,
            "sampler": sampler,
            "started": started,
            "secret_files": {password_file, truststore},
            "root": root,
        }
    finally:
        sampler.stop()
        broker.down()


def _client_conf(canary) -> dict:
    """The test's own client: the canary user, the broker's CA as PEM."""
    broker = canary["broker"]
    return {
        "bootstrap.servers": broker.sasl_ssl_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": canary["values"].sasl,
        "ssl.ca.location": str(broker.tls.ca_pem),
    }


def _sets(names, *extra: str) -> list[str]:
    sets = [
        f"source.topics=[{names('in')}]",
        f"source.group_id={names('group')}",
        f"sink.topic={names('out')}",
        f"sink.transactional_id_prefix={names('tx')}",
        f"sink.dead_letter_topic={names('dlq')}",
        "kafka.librdkafka_properties.sasl.oauthbearer.config=${env:CANARY_OAUTH}",
        *extra,
    ]
    return [arg for item in sets for arg in ("--set", item)]


def _cli(canary, *args, **kw):
    return run_cli(*args, env=canary["env"], timeout=kw.pop("timeout", 400), **kw)


def test_every_command_keeps_the_canaries_where_they_belong(
    canary, names, enrichment_service, flink_cluster
):
    values: Canaries = canary["values"]
    found: list[str] = []
    looked: dict[str, int] = {}

    def look(where: str, data: bytes) -> None:
        kind = "files" if where.startswith("/") else where.split(" (")[0].split(":")[0]
        kind = kind.split("/")[0].split(" sha256")[0].strip()
        looked[kind] = looked.get(kind, 0) + 1
        for name in hits(data, values.all()):
            found.append(f"{name} in {where}")

    conf = _client_conf(canary)
    topics = ("in", "out", "dlq", "eout", "sout", "bout")
    create_topics(conf, {names(t): 2 for t in topics})

    # The CLI: demo data, preflight, offsets, Kafka's transactions tool.
    _cli(canary, "demo", "passthrough", *_sets(names), "--records", "300", "--bad-every", "30")
    _cli(canary, "doctor", "passthrough", *_sets(names))
    # Each job, run locally.
    _cli(canary, "run", "passthrough", *_sets(names, "source.bounded=true"))
    assert len(read_all(conf, names("out"))) == 300
    _cli(canary, "offsets", "--job", "passthrough", *_sets(names), "--json")
    listing = _cli(canary, "kafka", "transactions", "--job", "passthrough", *_sets(names), "list")
    assert names("tx") in listing.stdout
    windowed = [
        json.dumps({"id": i, "key": f"k{i % 3}", "ts": 1_700_000_000_000 + i * 250})
        for i in range(100)
    ]
    create_topics(conf, {names("win"): 1, names("wout"): 1, names("late"): 1})
    produce(conf, names("win"), windowed)
    _cli(
        canary,
        "run",
        "windowed",
        *_sets(
            names,
            f"source.topics=[{names('win')}]",
            f"sink.topic={names('wout')}",
            f"window.late_topic={names('late')}",
            "source.bounded=true",
        ),
    )
    assert read_all(conf, names("wout"))
    # The enrich job, unbounded: its mini-cluster's REST API is looked at while it runs.
    job = RunningJob(
        "enrich",
        *_sets(
            names,
            f"sink.topic={names('eout')}",
            f"source.group_id={names('egroup')}",
            f"sink.transactional_id_prefix={names('etx')}",
            f"demo_service.url={enrichment_service.url}",
        ),
        env=canary["env"],
    )
    try:
        job.wait_for(r"records in [1-9]", 240)
        runs = [json.loads(p.read_text()) for p in (LOCAL_DIR / "runs").glob("*.json")]
        urls = [r["url"] for r in runs if r.get("prefix") == names("etx")]
        assert urls, runs
        for path, body in rest_configs(urls[-1], None).items():
            look(f"local run REST {path}", body)
    finally:
        assert job.interrupt() == 0, job.output
    look("the enrich run's output", job.output.encode())

    # A package, and a submission to the standalone cluster (the cluster's REST API).
    package_dir = canary["root"] / "package"
    _cli(canary, "package", "enrich", *_sets(names), "--out", str(package_dir))
    for path in package_dir.rglob("*"):
        if path.is_file():
            look(f"package {path.relative_to(package_dir)}", path.read_bytes())
    submitted = _cli(
        canary,
        "submit",
        "passthrough",
        *_sets(
            names,
            f"sink.topic={names('sout')}",
            f"source.group_id={names('sgroup')}",
            f"sink.transactional_id_prefix={names('stx')}",
        ),
        "--detached",
    )
    job_id = re.search(r"as ([0-9a-f]{32})", submitted.stdout).group(1)
    try:
        for path, body in rest_configs(flink_cluster.url, job_id).items():
            look(f"standalone cluster REST {path}", body)
    finally:
        _cli(canary, "jobs", "cancel", job_id, "--jobmanager", flink_cluster.url[7:], check=False)

    # Beam on Prism, bounded.
    from pipelines.beam.java import ensure_java, ensure_prism

    ensure_java()
    ensure_prism()
    _cli(
        canary,
        "beam",
        "run",
        "enrich",
        *_sets(
            names,
            f"sink.topic={names('bout')}",
            f"source.group_id={names('bgroup')}",
            f"sink.transactional_id_prefix={names('btx')}",
            f"demo_service.url={enrichment_service.url}",
            "beam.streaming=false",
            "beam.max_records=300",
        ),
    )
    assert (
        len(read_all(conf, names("bout"))) == 300 - 300 // 30
    )  # the demo's malformed ones: dead letters

    # The deploy image, every layer.
    from pipelines_dev.containers import DEPLOY_IMAGE, docker_problem

    problem = docker_problem(timeout=10)
    if problem is None:
        before, layers = layers_present(), ImageLayers()
        _cli(canary, "docker", "build", "--deploy", timeout=1800)
        for where, data in image_files(DEPLOY_IMAGE, before, layers):
            look(f"deploy image {where}", data)
        assert set(layers.scanned + layers.skipped) == set(image_layers(DEPLOY_IMAGE))
        print(f"[canary] deploy image: {len(layers.scanned)} layer(s) built here unpacked, "
              f"{len(layers.skipped)} reused from before the build hashed")  # fmt: skip
    elif os.environ.get("PIPELINES_TEST_BROKER") == "container":
        pytest.fail(f"the deploy image cannot be checked: {problem}")

    sampler: Sampler = canary["sampler"]
    assert sampler.rounds > 100, "the command lines were hardly sampled"
    found += [f"{name} on a command line: {line[:300]}" for name, line in sampler.found.items()]

    # Files: .local/ (written since the test began), the secure broker's state and logs.
    allowed = canary["secret_files"]
    converted = LOCAL_DIR / "tls-converted"
    roots = [LOCAL_DIR, canary["broker"].state_dir]
    for root in roots:
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink() or path in allowed:
                continue
            if root == LOCAL_DIR and path.stat().st_mtime < canary["started"]:
                continue
            if path.parent == canary["broker"].tls.dir and path.suffix == ".password":
                continue  # the broker's own secret files
            data = path.read_bytes()
            if hits(data, values.all()) and path.is_relative_to(converted):
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
                continue
            look(str(path), data)

    # The functions pickled into each job graph.
    pickled = list(canary["pickles"].iterdir())
    assert len(pickled) >= 5, "no pickled functions were recorded"
    for path in pickled:
        look(f"a pickled function ({path.name})", decoded(path.read_bytes()))

    print(f"[canary] command-line samples: {sampler.rounds} rounds; looked at: {looked}")
    assert not found, "\n".join(found)
