"""The `kafka.security` settings as each client gets them, and properties that may not
contradict a typed setting."""

from __future__ import annotations

import pytest

from pipelines.running import registry
from pipelines.settings import ConfigError, load_settings
from pipelines.settings.client_properties import (
    jaas_quote,
    java_client_properties,
    librdkafka_config,
)
from pipelines_dev.kafka_tls import ensure_tls

pytestmark = pytest.mark.unit


def settings(*sets: str, job: str = "passthrough"):
    return load_settings(
        job, overrides=list(sets), environ={}, sections=registry.load(job).sections
    ).settings


def conflict(*sets: str) -> str:
    with pytest.raises(ConfigError) as caught:
        settings(*sets)
    return str(caught.value)


SASL = (
    "kafka.security.protocol=SASL_SSL",
    "kafka.security.sasl_mechanism=SCRAM-SHA-512",
    "kafka.security.username=svc",
)


def test_a_property_contradicting_the_protocol_names_both():
    assert conflict("kafka.properties.security.protocol=SASL_SSL") == (
        "--set: kafka.properties.security.protocol: 'SASL_SSL' contradicts "
        "kafka.security.protocol ('PLAINTEXT'): set kafka.security.protocol instead; "
        "kafka.properties may only add properties no typed setting owns"
    )


def test_a_property_contradicting_the_checked_transaction_timeout_names_both():
    assert conflict("kafka.properties.transaction.timeout.ms=3600000") == (
        "--set: kafka.properties.transaction.timeout.ms: '3600000' contradicts "
        "sink.transaction_timeout ('600000'): set sink.transaction_timeout instead; "
        "kafka.properties may only add properties no typed setting owns"
    )


def test_a_source_property_contradicting_the_isolation_level_names_both():
    assert conflict("source.properties.isolation.level=read_uncommitted") == (
        "--set: source.properties.isolation.level: 'read_uncommitted' contradicts "
        "source.isolation_level ('read_committed'): set source.isolation_level instead; "
        "source.properties may only add properties no typed setting owns"
    )


def test_a_secret_property_conflict_does_not_show_the_secret():
    text = conflict(
        *SASL, "kafka.security.password=typed-pw", "kafka.properties.sasl.jaas.config=x y;"
    )
    assert text == (
        "--set: kafka.properties.sasl.jaas.config: (a secret) contradicts "
        "kafka.security.username/password: set kafka.security.username/password instead; "
        "kafka.properties may only add properties no typed setting owns"
    )
    assert "typed-pw" not in text


def test_a_property_saying_what_the_typed_setting_says_is_allowed():
    s = settings("kafka.properties.security.protocol=PLAINTEXT", "kafka.properties.linger.ms=5")
    assert java_client_properties(s.kafka)["linger.ms"] == "5"


def test_jaas_escapes_quotes_and_backslashes_and_leaves_semicolons():
    assert jaas_quote("pa\"ss;w'rd\\x") == '"pa\\"ss;w\'rd\\\\x"'
    s = settings(*SASL, 'kafka.security.password=a"b;c')
    assert java_client_properties(s.kafka)["sasl.jaas.config"] == (
        "org.apache.flink.kafka.shaded.org.apache.kafka.common.security.scram.ScramLoginModule"
        " required "
        'username="svc" password="a\\"b;c";'
    )


def test_truststores_in_each_format_for_each_client(tmp_path):
    """Java takes JKS, PKCS12 and PEM as they are; librdkafka gets PEM, exported by keytool
    from the stores, the same certificate as the CA's own PEM."""
    tls = ensure_tls(tmp_path / "tls")
    password = tls.store_password()
    ca = tls.ca_pem.read_text()
    for store, kind in (
        (tls.truststore_jks, "JKS"),
        (tls.truststore_p12, "PKCS12"),
        (tls.ca_pem, "PEM"),
    ):
        s = settings(
            "kafka.security.protocol=SSL",
            f"kafka.security.ssl_truststore_location={store}",
            f"kafka.security.ssl_truststore_password={password}",
        )
        java = java_client_properties(s.kafka)
        assert (java["ssl.truststore.location"], java["ssl.truststore.type"]) == (str(store), kind)
        assert ("ssl.truststore.password" in java) == (kind != "PEM")
        pem = librdkafka_config(s.kafka)["ssl.ca.location"]
        body = lambda text: "".join(text.split())  # noqa: E731 - line wrapping differs
        assert body(open(pem).read()) == body(ca), kind


def test_a_wrong_truststore_password_is_a_config_error_naming_the_key(tmp_path):
    tls = ensure_tls(tmp_path / "tls")
    s = settings(
        "kafka.security.protocol=SSL",
        f"kafka.security.ssl_truststore_location={tls.truststore_p12}",
        "kafka.security.ssl_truststore_password=wrong",
    )
    with pytest.raises(ConfigError) as caught:
        librdkafka_config(s.kafka)
    assert str(caught.value) == (
        "kafka.security.ssl_truststore_location: keytool cannot read it: "
        "java.io.IOException: keystore password was incorrect"
    )


def test_a_store_type_the_file_name_does_not_say_must_be_given():
    text = conflict(
        "kafka.security.protocol=SSL", "kafka.security.ssl_truststore_location=/x/trust"
    )
    assert text == (
        "--set: kafka.security: ssl_truststore_location '/x/trust': set ssl_truststore_type "
        "(JKS, PKCS12 or PEM); the file name does not say (.jks, .p12, .pfx, .pkcs12, .pem, "
        ".crt, .cer do)"
    )


def test_hostname_verification_for_both_clients():
    on = settings("kafka.security.protocol=SSL")
    off = settings("kafka.security.protocol=SSL", "kafka.security.ssl_hostname_verification=false")
    key = "ssl.endpoint.identification.algorithm"
    assert java_client_properties(on.kafka)[key] == "https"
    assert java_client_properties(off.kafka)[key] == ""
    assert librdkafka_config(on.kafka)[key] == "https"
    assert librdkafka_config(off.kafka)[key] == "none"


def test_oauthbearer_is_passed_through_to_each_client():
    s = settings(
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=OAUTHBEARER",
        "kafka.properties.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginModule required;",
        "kafka.librdkafka_properties.sasl.oauthbearer.method=oidc",
    )
    java = java_client_properties(s.kafka)
    assert java["sasl.mechanism"] == "OAUTHBEARER"
    assert java["sasl.jaas.config"].startswith("org.apache.kafka.common.security.oauthbearer.")
    rd = librdkafka_config(s.kafka)
    assert (rd["sasl.mechanism"], rd["sasl.oauthbearer.method"]) == ("OAUTHBEARER", "oidc")
    assert "sasl.username" not in rd


def test_sasl_without_a_password_says_what_it_needs():
    assert conflict(*SASL) == (
        "--set: kafka.security: SASL SCRAM-SHA-512 needs username and password "
        "(password as ${env:NAME} or ${file:path})"
    )


# Every client property a typed setting (or the project) owns: the setting named in the
# refusal and the value it gives on the committed passthrough config (None: "not set").
OWNED = [
    ("bootstrap.servers", "kafka.bootstrap_servers", "127.0.0.1:9092"),
    ("security.protocol", "kafka.security.protocol", "PLAINTEXT"),
    ("sasl.mechanism", "kafka.security.sasl_mechanism", None),
    (
        "ssl.endpoint.identification.algorithm",
        "kafka.security.ssl_hostname_verification",
        None,
    ),
    ("transaction.timeout.ms", "sink.transaction_timeout", "600000"),
    ("transactional.id", "sink.transactional_id_prefix", None),
    ("isolation.level", "source.isolation_level", "read_committed"),
    ("group.id", "source.group_id", "passthrough"),
    ("enable.auto.commit", "the project (Flink commits offsets on checkpoints)", "false"),
    ("acks", "the project (the sinks wait for all in-sync replicas)", "all"),
    ("ssl.truststore.location", "kafka.security.ssl_truststore_location", None),
    ("ssl.truststore.type", "kafka.security.ssl_truststore_type", None),
    ("ssl.keystore.location", "kafka.security.ssl_keystore_location", None),
    ("ssl.keystore.type", "kafka.security.ssl_keystore_type", None),
]
SECRET_OWNED = [
    ("sasl.jaas.config", "kafka.security.username/password"),
    ("ssl.truststore.password", "kafka.security.ssl_truststore_password"),
    ("ssl.keystore.password", "kafka.security.ssl_keystore_password"),
    ("ssl.key.password", "kafka.security.ssl_key_password"),
]


@pytest.mark.parametrize("section", ["kafka.properties", "source.properties"])
@pytest.mark.parametrize("prop,typed,value", OWNED)
def test_every_owned_property_is_refused_naming_its_setting(section, prop, typed, value):
    shown = f"({value!r})" if value is not None else "(not set)"
    assert conflict(f"{section}.{prop}=other") == (
        f"--set: {section}.{prop}: 'other' contradicts {typed} {shown}: set {typed} "
        f"instead; {section} may only add properties no typed setting owns"
    )
    if value is not None:  # saying what the setting says is allowed
        assert settings(f"{section}.{prop}={value}")


@pytest.mark.parametrize("prop,typed", SECRET_OWNED)
def test_every_owned_secret_property_is_refused_without_its_value(prop, typed):
    assert conflict(f"kafka.properties.{prop}=hunter2") == (
        f"--set: kafka.properties.{prop}: (a secret) contradicts {typed}: set {typed} "
        "instead; kafka.properties may only add properties no typed setting owns"
    )


def test_the_commit_and_poll_settings_own_their_source_properties_only():
    assert conflict("source.properties.commit.offsets.on.checkpoint=false") == (
        "--set: source.properties.commit.offsets.on.checkpoint: 'false' contradicts "
        "source.commit_offsets_on_checkpoint ('true'): set source.commit_offsets_on_checkpoint "
        "instead; source.properties may only add properties no typed setting owns"
    )
    assert settings("kafka.properties.commit.offsets.on.checkpoint=false")
    assert settings("source.properties.max.poll.records=7")  # no typed value: the user's
    assert conflict("source.max_poll_records=5", "source.properties.max.poll.records=7") == (
        "--set: source.properties.max.poll.records: '7' contradicts source.max_poll_records "
        "('5'): set source.max_poll_records instead; source.properties may only add "
        "properties no typed setting owns"
    )


def test_the_sinks_batch_256_kib_unless_kafka_properties_name_a_size():
    from pipelines.kafka.connectors import sink_properties

    props = sink_properties(settings(), id_suffix="-dlq")
    assert props["batch.size"] == "262144"
    assert (props["acks"], props["client.id"]) == ("all", "passthrough-sink-dlq")
    assert props["transaction.timeout.ms"] == "600000"
    assert sink_properties(settings("kafka.properties.batch.size=16384"))["batch.size"] == "16384"
    alo = sink_properties(settings("sink.delivery=at-least-once"))
    assert "transaction.timeout.ms" not in alo and alo["batch.size"] == "262144"


def test_oauthbearer_leaves_the_jaas_line_to_the_user():
    oauth = (
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=OAUTHBEARER",
    )
    assert settings(*oauth, "kafka.properties.sasl.jaas.config=x required;")


def test_a_store_being_converted_is_never_seen_half_written(tmp_path, monkeypatch):
    """Processes converting the same store at once (a job's Python workers, two commands):
    the converted file appears whole or not at all."""
    import threading
    import time

    from pipelines.settings import client_properties

    monkeypatch.setattr(client_properties, "_converted_dir", lambda: tmp_path)
    source = tmp_path / "store.jks"
    source.write_bytes(b"a store")
    whole = "-----BEGIN CERTIFICATE-----\n" + "A" * 4000 + "\n-----END CERTIFICATE-----\n"
    out = tmp_path / f"truststore-{client_properties._stamp(b'a store', '')}.pem"
    seen: list[str] = []
    done = threading.Event()

    def slow(_source, _password, path):
        with open(path, "w") as f:
            f.write(whole[:100])
            f.flush()
            time.sleep(0.3)
            f.write(whole[100:])

    def watch():
        while not done.is_set():
            if out.is_file():
                seen.append(out.read_text())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        got = client_properties._converted("k", str(source), None, False, "truststore-{}.pem", slow)
    finally:
        done.set()
        watcher.join()
    assert got == out and out.read_text() == whole
    assert set(seen) <= {whole}, "a half-written store was visible"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["store.jks", out.name])
