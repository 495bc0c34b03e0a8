"""The `kafka:` settings translated for each client that connects: the Java clients
inside Flink (KafkaSource, KafkaSink) and librdkafka (confluent-kafka: preflight, offsets,
the demo producer). They spell things differently and read different store formats; this
is the one place that knows how. The results hold secrets in clear: hand them to clients,
never print them.

It also holds which client properties a typed setting owns: `kafka.properties` and
`source.properties` may add properties, never silently contradict a typed setting.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.host.paths import local_state, private_dir, write_whole
from pipelines.settings.schema import (
    KafkaConnection,
    KafkaSecurity,
    SaslMechanism,
    StoreType,
)
from pipelines.settings.secrets import is_secret_property
from pipelines.settings.values import ConfigError

if TYPE_CHECKING:
    from pipelines.settings.schema import Settings

# The fat flink-sql-connector-kafka jar relocates the Kafka client under this prefix, so a
# JAAS line naming org.apache.kafka... fails inside Flink with "No LoginModule found for
# org.apache.kafka.common.security.scram.ScramLoginModule" (seen here). Any class named in
# kafka.properties (OAUTHBEARER's login module, callback handlers) needs the prefix too.
SHADED = "org.apache.flink.kafka.shaded."
LOGIN_MODULES: dict[SaslMechanism | None, str] = {
    SaslMechanism.PLAIN: SHADED + "org.apache.kafka.common.security.plain.PlainLoginModule",
    SaslMechanism.SCRAM_SHA_256: SHADED + "org.apache.kafka.common.security.scram.ScramLoginModule",
    SaslMechanism.SCRAM_SHA_512: SHADED + "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes: Kafka's parser (a StreamTokenizer) reads
    backslash escapes inside quotes, so `"` and `\\` are escaped; `;` and `'` need nothing."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_security_properties(sec: KafkaSecurity, shaded: bool = True) -> dict[str, str]:
    """What the typed security settings give the Java clients: inside Flink (`shaded`, the
    connector's relocated classes) or Kafka's own tools (plain class names)."""
    props = {"security.protocol": sec.protocol.value}
    if sec.sasl_mechanism is not None:
        props["sasl.mechanism"] = sec.sasl_mechanism.value
    module = LOGIN_MODULES.get(sec.sasl_mechanism)
    if module and not shaded:
        module = module.removeprefix(SHADED)
    if module and sec.username and sec.password:
        props["sasl.jaas.config"] = (
            f"{module} required username={jaas_quote(sec.username)} "
            f"password={jaas_quote(sec.password.get_secret_value())};"
        )
    if sec.protocol.value.endswith("SSL"):
        props["ssl.endpoint.identification.algorithm"] = (
            "https" if sec.ssl_hostname_verification else ""
        )
    if sec.ssl_truststore_location and (trust := sec.truststore_type()):
        props["ssl.truststore.location"] = sec.ssl_truststore_location
        props["ssl.truststore.type"] = trust.value
        if sec.ssl_truststore_password and trust is not StoreType.PEM:
            props["ssl.truststore.password"] = sec.ssl_truststore_password.get_secret_value()
    if sec.ssl_keystore_location and (keys := sec.keystore_type()):
        props["ssl.keystore.location"] = sec.ssl_keystore_location
        props["ssl.keystore.type"] = keys.value
        if sec.ssl_keystore_password:
            props["ssl.keystore.password"] = sec.ssl_keystore_password.get_secret_value()
        if sec.ssl_key_password:
            props["ssl.key.password"] = sec.ssl_key_password.get_secret_value()
    return props


def java_client_properties(kafka: KafkaConnection, shaded: bool = True) -> dict[str, str]:
    """Properties for the Java Kafka clients: `kafka.properties` plus the typed security
    (which `property_conflicts` has made sure they agree with). `shaded=False` for Kafka's
    own tools, which load the unrelocated client."""
    return {**kafka.properties, **java_security_properties(kafka.security, shaded)}


def librdkafka_config(kafka: KafkaConnection) -> dict[str, str]:
    """The same connection for confluent-kafka: PEM where Java takes JKS/PKCS12."""
    sec = kafka.security
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "security.protocol": sec.protocol.value}
    if sec.sasl_mechanism is not None:
        conf["sasl.mechanism"] = sec.sasl_mechanism.value
    if sec.sasl_mechanism in LOGIN_MODULES and sec.username and sec.password:
        conf["sasl.username"] = sec.username
        conf["sasl.password"] = sec.password.get_secret_value()
    if sec.protocol.value.endswith("SSL"):
        conf["ssl.endpoint.identification.algorithm"] = (
            "https" if sec.ssl_hostname_verification else "none"
        )
    if sec.ssl_truststore_location:
        conf["ssl.ca.location"] = str(pem_truststore(sec))
    if sec.ssl_keystore_location:
        kind = sec.keystore_type()
        if kind is StoreType.PEM:  # key and certificate chain in one file
            conf["ssl.certificate.location"] = sec.ssl_keystore_location
            conf["ssl.key.location"] = sec.ssl_keystore_location
            if sec.ssl_key_password:
                conf["ssl.key.password"] = sec.ssl_key_password.get_secret_value()
        else:
            conf["ssl.keystore.location"] = str(pkcs12_keystore(sec))
            if sec.ssl_keystore_password:
                conf["ssl.keystore.password"] = sec.ssl_keystore_password.get_secret_value()
    conf.update(kafka.librdkafka_properties)
    return conf


# ------------------------------------------------------------------ store conversions


def _converted_dir() -> Path:
    return private_dir(local_state("tls-converted"))


KEYTOOL_PASSWORD_ENV = "PIPELINES_KEYTOOL_STOREPASS"


def _keytool(*args: str, key: str, password: str) -> str:
    """keytool with the store password in its environment (`-storepass:env`), never on its
    command line, where any user of the machine could read it in `ps`."""
    env = {**os.environ, KEYTOOL_PASSWORD_ENV: password}
    try:
        result = subprocess.run(
            ["keytool", *args], capture_output=True, text=True, timeout=60, env=env
        )
    except FileNotFoundError:
        raise ConfigError(
            f"{key}: reading a JKS/PKCS12 store for librdkafka needs keytool (a JDK) on PATH"
        ) from None
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        reason = lines[0].removeprefix("keytool error: ") if lines else str(result.returncode)
        raise ConfigError(f"{key}: keytool cannot read it: {reason}")
    return result.stdout


def _stamp(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
    return h.hexdigest()[:20]


def _converted(key: str, location: str | None, secret, as_is: bool, name: str, convert) -> Path:
    """The store at `location` as librdkafka reads it: itself when `as_is`, else
    `convert(source, password, out)` once into a file named by the store's content and
    password (cached in a directory only this user can read)."""
    if location is None:
        raise ConfigError(f"{key}: not set")
    source = Path(location).expanduser()
    if not source.is_file():
        raise ConfigError(f"{key}: {source} does not exist")
    if as_is:
        return source
    password = secret.get_secret_value() if secret else ""
    out = _converted_dir() / name.format(_stamp(source.read_bytes(), password))
    if not out.is_file():
        # Processes converting the same store at once never read a half-written one.
        write_whole(out, lambda partial: convert(source, password, partial))
    return out


def pem_truststore(sec: KafkaSecurity) -> Path:
    """The truststore as PEM for librdkafka: as it is, or its certificates exported with
    keytool."""
    key = "kafka.security.ssl_truststore_location"
    kind = sec.truststore_type()

    def export(source: Path, password: str, out: Path) -> None:
        listing = _keytool(
            "-list", "-rfc", "-keystore", str(source),
            "-storetype", (kind or StoreType.JKS).value, "-storepass:env", KEYTOOL_PASSWORD_ENV,
            key=key, password=password,
        )  # fmt: skip
        blocks = _pem_blocks(listing)
        if not blocks:
            raise ConfigError(f"{key}: {source} holds no certificate")
        out.write_text("".join(blocks))

    return _converted(
        key,
        sec.ssl_truststore_location,
        sec.ssl_truststore_password,
        kind is StoreType.PEM,
        "truststore-{}.pem",
        export,
    )


def pkcs12_keystore(sec: KafkaSecurity) -> Path:
    """The keystore as PKCS12 for librdkafka (which reads no JKS)."""
    key = "kafka.security.ssl_keystore_location"

    def to_pkcs12(source: Path, password: str, out: Path) -> None:
        _keytool(
            "-importkeystore", "-noprompt", "-srckeystore", str(source),
            "-srcstoretype", "JKS", "-srcstorepass:env", KEYTOOL_PASSWORD_ENV,
            "-destkeystore", str(out), "-deststoretype", "PKCS12",
            "-deststorepass:env", KEYTOOL_PASSWORD_ENV,
            key=key, password=password,
        )  # fmt: skip

    return _converted(
        key,
        sec.ssl_keystore_location,
        sec.ssl_keystore_password,
        sec.keystore_type() is StoreType.PKCS12,
        "keystore-{}.p12",
        to_pkcs12,
    )


def _pem_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("-----BEGIN CERTIFICATE-----"):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith("-----END CERTIFICATE-----"):
                blocks.append("\n".join(current) + "\n")
                current = None
    return blocks


# ------------------------------------------------------------------ property conflicts


def owned_properties(settings: "Settings", section: str) -> dict[str, tuple[str, str | None]]:
    """Client property -> (the typed setting that owns it, the value it gives; None: the
    project sets none, so the property has no place in `section`)."""
    sec = settings.kafka.security
    java = java_security_properties(sec)
    src, sink = settings.source, settings.sink
    owned: dict[str, tuple[str, str | None]] = {
        "bootstrap.servers": ("kafka.bootstrap_servers", settings.kafka.bootstrap_servers),
        "security.protocol": ("kafka.security.protocol", java["security.protocol"]),
        "sasl.mechanism": ("kafka.security.sasl_mechanism", java.get("sasl.mechanism")),
        "ssl.endpoint.identification.algorithm": (
            "kafka.security.ssl_hostname_verification",
            java.get("ssl.endpoint.identification.algorithm"),
        ),
        "transaction.timeout.ms": ("sink.transaction_timeout", str(sink.transaction_timeout)),
        "transactional.id": ("sink.transactional_id_prefix", None),
        "isolation.level": ("source.isolation_level", src.isolation_level.value),
        "group.id": ("source.group_id", src.group_id),
        "enable.auto.commit": ("the project (Flink commits offsets on checkpoints)", "false"),
        # An acknowledged record must survive a broker's loss: the sinks wait for every
        # in-sync replica (min.insync.replicas of them at least).
        "acks": ("the project (the sinks wait for all in-sync replicas)", "all"),
    }
    if sec.sasl_mechanism is not SaslMechanism.OAUTHBEARER:  # OAUTHBEARER's JAAS is the user's
        owned["sasl.jaas.config"] = (
            "kafka.security.username/password",
            java.get("sasl.jaas.config"),
        )
    for prop, typed in (
        ("ssl.truststore.location", "ssl_truststore_location"),
        ("ssl.truststore.type", "ssl_truststore_type"),
        ("ssl.truststore.password", "ssl_truststore_password"),
        ("ssl.keystore.location", "ssl_keystore_location"),
        ("ssl.keystore.type", "ssl_keystore_type"),
        ("ssl.keystore.password", "ssl_keystore_password"),
        ("ssl.key.password", "ssl_key_password"),
    ):
        owned[prop] = (f"kafka.security.{typed}", java.get(prop))
    if section == "source.properties":
        owned["commit.offsets.on.checkpoint"] = (
            "source.commit_offsets_on_checkpoint",
            str(src.commit_offsets_on_checkpoint).lower(),
        )
        if src.max_poll_records is not None:
            owned["max.poll.records"] = ("source.max_poll_records", str(src.max_poll_records))
    return owned


def property_conflicts(settings: "Settings") -> list[tuple[str, str]]:
    """(dotted key of the property, why) for every property that contradicts the typed
    setting owning it. Secret values are never shown."""
    problems = []
    for section, props in (
        ("kafka.properties", settings.kafka.properties),
        ("source.properties", settings.source.properties),
    ):
        owned = owned_properties(settings, section)
        for prop, value in props.items():
            if prop not in owned:
                continue
            typed, expected = owned[prop]
            if expected is not None and value == expected:
                continue  # says what the typed setting says: redundant, not a conflict
            if is_secret_property(prop):
                shown, typed_shown = "(a secret)", ""
            else:
                shown = repr(value)
                typed_shown = f" ({expected!r})" if expected is not None else " (not set)"
            problems.append(
                (
                    f"{section}.{prop}",
                    f"{shown} contradicts {typed}{typed_shown}: set {typed} instead; "
                    f"{section} may only add properties no typed setting owns",
                )
            )
    return problems
