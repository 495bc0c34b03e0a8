"""Every job and every CLI command against a secured broker: `pipelines-dev kafka up --secure`
(a TLS listener and a SASL_SSL SCRAM-SHA-512 one, CA and certificates made at start, the
user made and granted its ACLs through the Admin API as the broker's admin), the password from `${env:...}` and `${file:...}`,
truststores as JKS, PKCS12 and PEM. Topics are created and read back over SASL_SSL too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pipelines.settings import load_settings
from pipelines.settings.client_properties import librdkafka_config
from pipelines_dev.demo import demo_values
from pipelines_dev.kafka_broker import SCRAM_USER, Broker
from pipelines_dev.kafka_tls import ensure_tls, write_secret
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import assert_dead_letters_are, run_cli

pytestmark = pytest.mark.integration

QUOTED_USER = "quoted"
QUOTED_PASSWORD = "pa\"ss;w'rd x;"  # breaks an unescaped JAAS string


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    broker = Broker(
        state_dir=tmp_path_factory.mktemp("secure-kafka"), port=free_ports(4), secure=True
    )
    broker.up()
    broker.add_scram_user(QUOTED_USER, QUOTED_PASSWORD)
    write_secret(broker.tls.dir / f"{QUOTED_USER}.password", QUOTED_PASSWORD)
    try:
        yield broker
    finally:
        broker.down()


def security_sets(
    broker: Broker,
    password_ref: str,
    truststore: Path | None = None,
    user: str = SCRAM_USER,
) -> list[str]:
    tls = broker.tls
    truststore = truststore or tls.truststore_p12
    sets = [
        f"kafka.bootstrap_servers={broker.sasl_ssl_bootstrap}",
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=SCRAM-SHA-512",
        f"kafka.security.username={user}",
        f"kafka.security.password={password_ref}",
        f"kafka.security.ssl_truststore_location={truststore}",
    ]
    if truststore.suffix != ".pem":
        sets.append(f"kafka.security.ssl_truststore_password=${{file:{tls.store_password_file}}}")
    return sets


def as_args(sets: list[str]) -> list[str]:
    return [arg for item in sets for arg in ("--set", item)]


def file_ref(broker: Broker, user: str = SCRAM_USER) -> str:
    return f"${{file:{broker.user_password_file(user)}}}"


def client_conf(broker: Broker) -> dict:
    """A librdkafka config over SASL_SSL, made the way the CLI makes one."""
    settings = load_settings(
        "passthrough", overrides=security_sets(broker, file_ref(broker)), environ={}
    ).settings
    return librdkafka_config(settings.kafka)


def job_sets(names, *, dead_letters=False) -> list[str]:
    sets = [
        f"source.topics=[{names('in')}]",
        f"source.group_id={names('group')}",
        f"sink.topic={names('out')}",
        f"sink.transactional_id_prefix={names('tx')}",
        "source.bounded=true",
    ]
    if dead_letters:
        sets.append(f"sink.dead_letter_topic={names('dlq')}")
    return sets


def test_passthrough_over_sasl_ssl_password_from_env_jks_truststore(secure, names):
    conf = client_conf(secure)
    create_topics(conf, {names("in"): 2, names("out"): 2})
    values = [f"value-{i}".encode() for i in range(300)]
    produce(conf, names("in"), values)
    password = secure.user_password_file().read_text().strip()
    run_cli(
        "run",
        "passthrough",
        *as_args(
            security_sets(secure, "${env:SECURE_KAFKA_PASSWORD}", secure.tls.truststore_jks)
            + job_sets(names)
        ),
        env={"SECURE_KAFKA_PASSWORD": password},
    )
    assert sorted(read_all(conf, names("out"))) == sorted(values)


def test_enrich_over_sasl_ssl_password_from_file_pkcs12_truststore(
    secure, names, enrichment_service
):
    conf = client_conf(secure)
    create_topics(conf, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    values = demo_values(300, bad_every=30)
    produce(conf, names("in"), values)
    run_cli(
        "run",
        "enrich",
        *as_args(
            security_sets(secure, file_ref(secure), secure.tls.truststore_p12)
            + job_sets(names, dead_letters=True)
            + [f"demo_service.url={enrichment_service.url}"]
        ),
    )
    out = [json.loads(v) for v in read_all(conf, names("out"))]
    assert sorted(r["id"] for r in out) == sorted(
        json.loads(v)["id"] for v in values if v.startswith(b'{"id"')
    )
    assert_dead_letters_are(read_all(conf, names("dlq")), names("in"), values, 2)


def test_windowed_over_sasl_ssl_with_a_pem_truststore_and_a_quoted_password(secure, names):
    """The password holds quotes and semicolons: the JAAS line is escaped, librdkafka takes
    it as it is."""
    conf = client_conf(secure)
    create_topics(conf, {names("in"): 2, names("out"): 2, names("dlq"): 1, names("late"): 1})
    base = 1_700_000_000_000
    records = [{"id": i, "key": f"k{i % 3}", "ts": base + i * 250} for i in range(200)]
    produce(conf, names("in"), [json.dumps(r) for r in records])
    run_cli(
        "run",
        "windowed",
        *as_args(
            security_sets(
                secure, file_ref(secure, QUOTED_USER), secure.tls.ca_pem, user=QUOTED_USER
            )
            + job_sets(names, dead_letters=True)
            + [f"window.late_topic={names('late')}", "watermarks.max_out_of_orderness=60s"]
        ),
    )
    expected = Counter((r["key"], base + (r["ts"] - base) // 10_000 * 10_000) for r in records)
    out = [json.loads(v) for v in read_all(conf, names("out"))]
    assert sorted((r["key"], r["window_start"], r["count"]) for r in out) == sorted(
        (key, start, n) for (key, start), n in expected.items()
    )  # a multiset: a window emitted twice fails


def test_wrong_password_is_one_line_saying_authentication_failed(secure, names, tmp_path):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password")
    proc = run_cli(
        "doctor",
        "passthrough",
        *as_args(security_sets(secure, f"${{file:{wrong}}}") + job_sets(names)),
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == [
        f"error: kafka.security: authentication failed at {secure.sasl_ssl_bootstrap} "
        f"(SCRAM-SHA-512 as user '{SCRAM_USER}'): Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
    ]
    assert proc.stderr.splitlines() == ["error: preflight found 1 error(s); nothing was started"]
    assert "not-the-password" not in proc.stdout + proc.stderr


def test_untrusted_certificate_is_one_line_saying_so(secure, names, tmp_path):
    other_ca = ensure_tls(tmp_path / "other-ca")  # a truststore of a CA the broker never saw
    sets = security_sets(secure, file_ref(secure), other_ca.truststore_p12)
    sets[-1] = f"kafka.security.ssl_truststore_password=${{file:{other_ca.store_password_file}}}"
    proc = run_cli("doctor", "passthrough", *as_args(sets + job_sets(names)), check=False)
    assert proc.returncode == 2
    assert proc.stdout.splitlines() == [
        f"error: kafka.security.ssl_truststore_location: the broker's certificate at "
        f"{secure.sasl_ssl_bootstrap} is not trusted by {other_ca.truststore_p12} "
        f"(certificate verify failed)"
    ]


def test_cli_commands_connect_as_the_job_does(secure, names):
    """demo (topic creation, producing), doctor, offsets and kafka transactions, each with
    only the job's secured config to go on."""
    sets = as_args(security_sets(secure, file_ref(secure)) + job_sets(names))
    run_cli("demo", "passthrough", *sets, "--records", "120", "--bad-every", "0")
    conf = client_conf(secure)
    assert len(read_all(conf, names("in"))) == 120
    doctor = run_cli("doctor", "passthrough", *sets)
    assert "error" not in doctor.stdout + doctor.stderr
    run_cli("run", "passthrough", *sets)
    offsets = run_cli("offsets", "--job", "passthrough", *sets, "--json")
    rows = json.loads(offsets.stdout)
    assert {r["topic"] for r in rows} == {names("in")}
    assert sum(r["log_end"] for r in rows) == 120
    listing = run_cli("kafka", "transactions", "--job", "passthrough", *sets, "list")
    assert names("tx") in listing.stdout


def test_the_secure_brokers_files_are_private(secure):
    """Its config holds the store passwords, its data the records."""
    import stat

    def mode(path):
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(secure.state_dir / "server.properties") == 0o600
    assert mode(secure.state_dir) == 0o700
    assert mode(secure.tls.dir) == 0o700
    assert mode(secure.user_password_file()) == 0o600


def _attempt(conf: dict, topic: str, wait_s: float = 12.0) -> tuple[str | None, int, list[str]]:
    """Try to write one record and to read the topic from the start with `conf`: (the
    write's error, records read, errors the consumer saw)."""
    import time

    from confluent_kafka import Consumer, Producer

    from pipelines.kafka.clients import quiet_logger

    errors: list[str] = []
    base = {**conf, "logger": quiet_logger(), "error_cb": lambda e: errors.append(str(e))}
    producer = Producer({**base, "message.timeout.ms": int(wait_s * 1000)})
    outcome: list = []
    producer.produce(topic, b"intruder", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(wait_s + 10)
    write_error = str(outcome[0]) if outcome and outcome[0] is not None else None
    if not outcome:
        write_error = "no delivery report"
    consumer = Consumer({**base, "group.id": f"intruder-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, deadline = 0, time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(str(msg.error()))
            else:
                read += 1
    finally:
        consumer.close()
    return write_error, read, errors


def test_no_client_without_credentials_reads_or_writes(secure, names):
    """Plaintext on every port the broker opens, TLS with a trusted CA but no login on the
    TLS and SASL_SSL ports: each is refused both ways, while the `pipelines` user reads all."""
    conf = client_conf(secure)
    create_topics(conf, {names("in"): 1})
    produce(conf, names("in"), [b"secret-record"] * 5)
    tls_only = {"security.protocol": "SSL", "ssl.ca.location": str(secure.tls.ca_pem)}
    attempts = {
        f"plaintext at {port} ({role})": {"bootstrap.servers": f"127.0.0.1:{port}"}
        for port, role in secure.ports()
    }
    attempts[f"TLS without login at {secure.ssl_bootstrap}"] = {
        "bootstrap.servers": secure.ssl_bootstrap,
        **tls_only,
    }
    attempts[f"TLS without login at {secure.sasl_ssl_bootstrap}"] = {
        "bootstrap.servers": secure.sasl_ssl_bootstrap,
        **tls_only,
    }
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(attempts)) as pool:  # each waits out its own timeouts
        outcomes = dict(
            zip(attempts, pool.map(lambda c: _attempt(c, names("in")), attempts.values()))
        )
    for what, (write_error, read, _errors) in outcomes.items():
        assert write_error is not None, f"{what}: a record was written"
        assert read == 0, f"{what}: read {read} records"
    # The TLS listener authenticates nobody, so it is the authorizer that says no there.
    write_error, _, errors = _attempt(
        {"bootstrap.servers": secure.ssl_bootstrap, **tls_only}, names("in"), wait_s=6
    )
    assert "Authorization failed" in write_error or "AUTHORIZATION" in write_error, write_error
    assert read_all(conf, names("in")) == [b"secret-record"] * 5
