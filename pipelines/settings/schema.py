"""The settings schema: one typed section per concern, validated once, before anything
touches Flink. Every key is in docs/configuration.md's table."""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from pathlib import PurePath
from typing import Any

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from pipelines.settings.values import Model, duration_fields, parse_duration_ms  # noqa: F401

# --------------------------------------------------------------------------- kafka


class SecurityProtocol(str, Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(str, Enum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    # Passed through: the login module, token endpoint and callback handler are the
    # provider's, in kafka.properties (Java) and kafka.librdkafka_properties (the CLI).
    OAUTHBEARER = "OAUTHBEARER"


class StoreType(str, Enum):
    JKS = "JKS"
    PKCS12 = "PKCS12"
    PEM = "PEM"


STORE_SUFFIXES = {
    ".jks": StoreType.JKS,
    ".p12": StoreType.PKCS12,
    ".pfx": StoreType.PKCS12,
    ".pkcs12": StoreType.PKCS12,
    ".pem": StoreType.PEM,
    ".crt": StoreType.PEM,
    ".cer": StoreType.PEM,
}


def _store_type(location: str | None, given: StoreType | None, key: str) -> StoreType | None:
    if location is None:
        return None
    if given is not None:
        return given
    suffix = PurePath(location).suffix.lower()
    if suffix not in STORE_SUFFIXES:
        raise ValueError(
            f"{key}_location {location!r}: set {key}_type (JKS, PKCS12 or PEM); the file "
            f"name does not say ({', '.join(STORE_SUFFIXES)} do)"
        )
    return STORE_SUFFIXES[suffix]


class KafkaSecurity(Model):
    """Secrets never sit in committed files: write `${env:NAME}` or `${file:path}`.

    One description for both kinds of client: the Java clients inside Flink get JKS, PKCS12
    or PEM stores as they are; librdkafka (preflight, offsets, demo) gets PEM, converted from
    JKS/PKCS12 with keytool by the project (pipelines/settings/client_properties.py)."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: SecretStr | None = None
    ssl_truststore_location: str | None = None
    ssl_truststore_password: SecretStr | None = None
    ssl_truststore_type: StoreType | None = None  # null: from the file name
    ssl_keystore_location: str | None = None  # a client certificate (mutual TLS)
    ssl_keystore_password: SecretStr | None = None
    ssl_keystore_type: StoreType | None = None  # null: from the file name
    ssl_key_password: SecretStr | None = None
    ssl_hostname_verification: bool = True

    @model_validator(mode="after")
    def _complete(self) -> "KafkaSecurity":
        sasl = self.protocol.value.startswith("SASL")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"{self.protocol.value} needs sasl_mechanism")
        mechanism = self.sasl_mechanism
        if sasl and mechanism is not None and mechanism is not SaslMechanism.OAUTHBEARER:
            if not (self.username and self.password):
                raise ValueError(
                    f"SASL {mechanism.value} needs username and password "
                    "(password as ${env:NAME} or ${file:path})"
                )
        if not sasl and self.sasl_mechanism is not None:
            raise ValueError(
                f"sasl_mechanism {self.sasl_mechanism.value} needs protocol SASL_SSL or "
                f"SASL_PLAINTEXT (protocol is {self.protocol.value})"
            )
        if not self.protocol.value.endswith("SSL") and (
            self.ssl_truststore_location or self.ssl_keystore_location
        ):
            raise ValueError(
                f"a truststore or keystore needs protocol SSL or SASL_SSL "
                f"(protocol is {self.protocol.value})"
            )
        self.truststore_type()
        self.keystore_type()
        return self

    def truststore_type(self) -> StoreType | None:
        return _store_type(self.ssl_truststore_location, self.ssl_truststore_type, "ssl_truststore")

    def keystore_type(self) -> StoreType | None:
        return _store_type(self.ssl_keystore_location, self.ssl_keystore_type, "ssl_keystore")


class KafkaConnection(Model):
    bootstrap_servers: str = "127.0.0.1:9092"
    # Extra properties for the Java clients in Flink (source and sinks); one that a typed
    # setting owns (security.protocol, transaction.timeout.ms, ...) must agree with it.
    properties: dict[str, str] = Field(default_factory=dict)
    # Extra librdkafka properties for the CLI's own clients (preflight, offsets, demo).
    librdkafka_properties: dict[str, str] = Field(default_factory=dict)
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)

    @field_validator("properties", "librdkafka_properties", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                str(k): str(val).lower() if isinstance(val, bool) else str(val)
                for k, val in v.items()
            }
        return v


# --------------------------------------------------------------------------- source


class StartMode(str, Enum):
    GROUP_OFFSETS = "group-offsets"
    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC_OFFSETS = "specific-offsets"
    TIMESTAMP = "timestamp"


class OffsetReset(str, Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    FAIL = "fail"


class IsolationLevel(str, Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


class PartitionOffset(Model):
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class StartPosition(Model):
    mode: StartMode = StartMode.GROUP_OFFSETS
    # group-offsets: where to start when the group has no committed offset;
    # specific-offsets: where partitions that are not listed start.
    fallback: OffsetReset = OffsetReset.EARLIEST
    offsets: list[PartitionOffset] = Field(default_factory=list)
    timestamp: int | None = None  # epoch milliseconds after parsing

    @field_validator("timestamp", mode="before")
    @classmethod
    def _parse_timestamp(cls, v: Any) -> Any:
        if v is None or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        if isinstance(v, datetime):
            return int(v.timestamp() * 1000)
        if isinstance(v, str):
            if v.strip().isdigit():
                return int(v)
            try:
                parsed = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{v!r} is neither ISO-8601 nor epoch milliseconds") from None
            if parsed.tzinfo is None:
                raise ValueError(f"{v!r} has no time zone; add one, e.g. 2024-01-01T00:00:00Z")
            return int(parsed.timestamp() * 1000)
        raise ValueError("expected ISO-8601 text or epoch milliseconds")

    @model_validator(mode="after")
    def _mode_needs(self) -> "StartPosition":
        if self.mode is StartMode.SPECIFIC_OFFSETS and not self.offsets:
            raise ValueError("mode specific-offsets needs at least one entry in offsets")
        if self.mode is StartMode.TIMESTAMP and self.timestamp is None:
            raise ValueError("mode timestamp needs timestamp (ISO-8601 or epoch ms)")
        return self


class SourceSettings(Model):
    topics: list[str] = Field(default_factory=list)
    topic_pattern: str | None = None
    group_id: str | None = None
    start: StartPosition = Field(default_factory=StartPosition)
    commit_offsets_on_checkpoint: bool = True
    partition_discovery_interval: int | None = 300_000
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    # Stop at the log-end offsets seen at start: a backfill, a demo, a test.
    bounded: bool = False
    # Records per Kafka poll; null: enrichment.capacity. The source commits offsets from
    # its fetcher thread, which waits while a polled batch is still being worked through:
    # measured here, 500 records behind 250 ms lookups held commits for ~27 s.
    max_poll_records: int | None = Field(default=None, ge=1)
    # Kafka consumer properties for the source only (kafka.properties apply to both).
    properties: dict[str, str] = Field(default_factory=dict)

    _dur = duration_fields("partition_discovery_interval")

    _props = field_validator("properties", mode="before")(
        lambda cls, v: KafkaConnection._stringify(v)
    )

    @field_validator("topics", mode="before")
    @classmethod
    def _one_topic(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _topics_xor_pattern(self) -> "SourceSettings":
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("set exactly one of topics or topic_pattern")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise ValueError(f"topic_pattern is not a valid regex: {exc}") from None
        return self


# --------------------------------------------------------------------------- checkpoints


class CheckpointMode(str, Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


class Retention(str, Enum):
    RETAIN = "retain"  # keep the last checkpoint when the job is cancelled: it can be resumed
    DELETE = "delete"  # drop it on cancellation; kept only when the job fails


class CheckpointSettings(Model):
    enabled: bool = True
    interval: int = Field(default=10_000, ge=10)
    mode: CheckpointMode = CheckpointMode.EXACTLY_ONCE
    min_pause: int = 500
    timeout: int = Field(default=120_000, ge=10)
    max_concurrent: int = Field(default=1, ge=1)
    tolerable_failures: int = Field(default=0, ge=0)
    retention: Retention = Retention.RETAIN
    # `{job}` is replaced by the job name, so jobs never share a checkpoint directory.
    # Unset: .local/checkpoints/{job} (and .local/savepoints/{job}) of the checkout or
    # package the job runs from, resolved at run time (environment.checkpoint_dir), so a
    # packaged config never carries the building machine's paths.
    storage: str | None = None
    savepoints: str | None = None
    unaligned: bool = False

    _dur = duration_fields("interval", "min_pause", "timeout")

    @model_validator(mode="after")
    def _unaligned_needs_exactly_once(self) -> "CheckpointSettings":
        if self.unaligned and self.mode is CheckpointMode.AT_LEAST_ONCE:
            raise ValueError(
                "unaligned checkpoints need mode exactly-once "
                "(Flink ignores them under at-least-once)"
            )
        return self

    @field_validator("storage", "savepoints")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "://" not in v:
            if not v.startswith("/"):
                raise ValueError(f"{v!r} must be a URI (file:///..., s3://...) or an absolute path")
            return "file://" + v
        return v


class RestartStrategy(str, Enum):
    FIXED_DELAY = "fixed-delay"
    EXPONENTIAL_DELAY = "exponential-delay"
    NONE = "none"


class RestartSettings(Model):
    strategy: RestartStrategy = RestartStrategy.FIXED_DELAY
    attempts: int = Field(default=3, ge=0)
    delay: int = 2_000
    max_delay: int = 60_000

    _dur = duration_fields("delay", "max_delay")


# --------------------------------------------------------------------------- sink


class DeliveryGuarantee(str, Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


class TransactionNaming(str, Enum):
    # a new transactional id per checkpoint per subtask (the connector's default, its 3.x
    # behaviour): the broker keeps each one's state for transactional.id.expiration.ms (7 days)
    INCREMENTING = "incrementing"
    # a bounded set of ids per subtask, reused: recovery lists open transactions on the broker
    # (the ListTransactions API: DESCRIBE on the transactional ids where ACLs apply)
    POOLING = "pooling"


class SinkSettings(Model):
    topic: str
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    transactional_id_prefix: str | None = None
    transaction_naming: TransactionNaming = TransactionNaming.INCREMENTING
    # Must exceed checkpoint interval + timeout and stay within the broker's
    # transaction.max.timeout.ms (900000 by default); Flink's own default (1 h) does not.
    transaction_timeout: int = 600_000
    dead_letter_topic: str | None = None
    # The output record's Kafka key: null keeps the key of the input record it came from
    # (window counts: the window key); a JSON field name sets it from that field instead.
    key_field: str | None = None
    # Where an output record corresponds to one input record (not window counts), carry
    # that record's headers and timestamp over; false: no headers, Flink's timestamp.
    carry_headers: bool = True
    carry_timestamp: bool = True
    # Largest dead-letter message; null: the producer's max.request.size (kafka.properties,
    # Kafka's default 1 MiB). Larger originals are truncated, their size and digest kept.
    dead_letter_max_bytes: int | None = Field(default=None, ge=16_384)

    _dur = duration_fields("transaction_timeout")

    def max_record_bytes(self, kafka: "KafkaConnection") -> int:
        """What one record written by this job's sinks may weigh."""
        return int(kafka.properties.get("max.request.size", 1_048_576))

    def dead_letter_bytes(self, kafka: "KafkaConnection") -> int:
        return min(self.dead_letter_max_bytes or 1 << 62, self.max_record_bytes(kafka))


# --------------------------------------------------------------------------- enrichment


class OnFailure(str, Enum):
    DEAD_LETTER = "dead-letter"  # the record goes to dead letters with the reason: replayable
    MARK_MISSING = "mark-missing"  # emit the record with enrichment missing and why
    FAIL = "fail"  # fail the job (the restart strategy decides what next)


class EnrichmentOperator(str, Enum):
    # Records cross into Python in batches through PyFlink's AsyncDataStream (process mode)
    BATCHED = "batched"
    # batches as `batched`, lookups on the stage's own event loop, in flight across batches:
    # no AsyncFunction, so thread mode runs it too (pipelines.lookups.flowing)
    FLOWING = "flowing"


class EnrichmentSettings(Model):
    operator: EnrichmentOperator = EnrichmentOperator.FLOWING
    batch_size: int = Field(default=100, ge=1)
    batch_delay: int = 20  # longest a partial batch waits before it is sent on
    # Lookups that start together go to the client's `lookup_batch` as one call, where the
    # client has one (pipelines.lookups)
    coalesce: bool = False
    capacity: int = Field(default=100, ge=1)
    # The flowing operator only: let the in-flight bound grow from `capacity` up to this
    # while round trips stay flat, and shrink when they rise (pipelines.lookups.concurrency);
    # null: `capacity` is fixed.
    max_capacity: int | None = Field(default=None, ge=1)
    timeout: int = Field(default=2_000, ge=1)
    retries: int = Field(default=2, ge=0)
    backoff: int = 100
    ordered: bool = False
    # After the retries of a transient failure (timeout, connection, 5xx). A permanent
    # failure (the service says the record cannot be enriched, e.g. 4xx) always dead-letters.
    on_failure: OnFailure = OnFailure.DEAD_LETTER

    _dur = duration_fields("timeout", "backoff", "batch_delay")

    @model_validator(mode="after")
    def _max_capacity_above_capacity(self) -> "EnrichmentSettings":
        if self.max_capacity is not None and self.max_capacity < self.capacity:
            raise ValueError(
                f"max_capacity ({self.max_capacity}) is below capacity ({self.capacity}): "
                "the in-flight bound adapts from capacity up to max_capacity"
            )
        return self

    def effective_batch_size(self) -> int:
        """A batch never holds more records than may be in flight at once."""
        return min(self.batch_size, self.capacity)

    def elements_in_flight(self) -> int:
        """Stream elements (batches) the stage holds: a checkpoint waits for these. Batches
        x batch size never exceeds `capacity`."""
        return max(1, self.capacity // self.effective_batch_size())


class BeamRunner(str, Enum):
    PRISM = "prism"  # Beam's portable runner, built from the Go module proxy; streaming or bounded
    DIRECT = "direct"  # the Python DirectRunner (FnApiRunner): bounded reads only


class BeamSettings(Model):
    """The Beam pipeline (pipelines/beam) only; it shares every other section with the
    PyFlink jobs. Streaming reads until stopped; a bounded run stops after `max_records`
    (spread evenly over the partitions by KafkaIO: preflight refuses a count a partition
    cannot supply, which would wait forever) or after `max_read_time`."""

    runner: BeamRunner = BeamRunner.PRISM
    streaming: bool = True
    max_records: int | None = Field(default=None, ge=1)
    max_read_time: int | None = None
    # Commit offsets when a bundle's output is final (KafkaIO commitOffsetsInFinalize).
    # Commit the offsets a bundle read once its output is written (a rerun resumes there).
    commit_offsets: bool = True
    # How long Beam's Python client waits on the job service (Prism) before giving up.
    job_server_timeout: int = 3_600_000
    # A hung pipeline ends as an error after this long without progress; 0: never.
    stall_timeout: int = 300_000
    # Prism: the job must be accepted within this. The DirectRunner reports nothing until
    # the run ends, so no deadline applies to it: its run is as long as its bounded read.
    start_timeout: int = 180_000

    _dur = duration_fields("max_read_time", "job_server_timeout", "stall_timeout", "start_timeout")

    @model_validator(mode="after")
    def _bounded_needs_a_limit(self) -> "BeamSettings":
        if self.runner is BeamRunner.DIRECT and self.streaming:
            raise ValueError(
                "the direct runner reads bounded only: set beam.streaming: false "
                "(with beam.max_records or beam.max_read_time), or runner: prism"
            )
        if not self.streaming and self.max_records is None and self.max_read_time is None:
            raise ValueError(
                "a bounded run (beam.streaming: false) needs beam.max_records or "
                "beam.max_read_time, or it never ends"
            )
        return self


class ExecutionMode(str, Enum):
    PROCESS = "process"  # a Python worker process beside the JVM, records over Beam's data plane
    THREAD = "thread"  # the Python stage inside the TaskManager's JVM (pemja): no data plane


class PythonSettings(Model):
    """How records reach the Python worker. PyFlink finishes the open bundle before every
    checkpoint barrier, so a bundle of 1000 records (Flink's default) behind a 250 ms
    lookup with 10 in flight holds each checkpoint for ~25 s: the reports' stalled offset
    commits, even with async I/O. Default here: one round of lookups per bundle."""

    bundle_size: int | None = Field(default=None, ge=1)  # null: enrichment.capacity
    bundle_time: int = 1_000
    # Jobs without enrichment: records per batch a Python stage receives (enrichment's own
    # batch_size applies behind lookups). One crossing per batch, not per record.
    batch_size: int = Field(default=500, ge=1)
    batch_delay: int = 20  # longest a partial batch waits before it is sent on
    # Where the job's Python stages run (Flink's python.execution-mode, one for the job).
    # Unset: thread, or process for an enrichment operator thread mode cannot run
    # (Settings._execution_mode_follows_the_operator).
    execution_mode: ExecutionMode = ExecutionMode.THREAD

    _dur = duration_fields("bundle_time", "batch_delay")


class WatermarkSettings(Model):
    max_out_of_orderness: int = 5_000
    idleness: int | None = 30_000  # null switches idleness off
    event_time_field: str = "ts"
    # A record whose event time is further ahead of the clock than this goes to dead
    # letters: let through, it would move the watermark and make every later record of
    # its partition late. null: no limit.
    max_future_skew: int | None = Field(default=3_600_000, ge=0)

    _dur = duration_fields("max_out_of_orderness", "idleness", "max_future_skew")


class WindowSettings(Model):
    size: int = Field(default=10_000, ge=1)
    allowed_lateness: int = 0
    key_field: str = "key"
    late_topic: str | None = None

    _dur = duration_fields("size", "allowed_lateness")


class FieldType(str, Enum):
    ANY = "any"  # present and not null
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    OBJECT = "object"
    ARRAY = "array"


class ParseSettings(Model):
    # A list of names (each must be present and not null) or a mapping name -> type.
    required_fields: dict[str, FieldType] = Field(default_factory=lambda: {"id": FieldType.ANY})
    # Where each record's origin (topic, partition, offset, timestamp) is added; a record
    # that already has a field of this name goes to dead letters rather than lose it.
    # null: add no origin block.
    origin_field: str | None = "_origin"
    # passthrough only (the other jobs always parse): false copies bytes in the JVM; true
    # parses and checks each record, bad ones to dead letters.
    validate_records: bool = False

    @field_validator("required_fields", mode="before")
    @classmethod
    def _names_or_types(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list):
            return {str(name): FieldType.ANY for name in v}
        return v


class ErrorSettings(Model):
    """An unexpected exception for one record sends that record to dead letters; this many
    in a row, with no record getting through in between, is a bug, and fails the job."""

    max_unexpected_in_a_row: int = Field(default=100, ge=1)


class FaultSettings(Model):
    """Fault injection for the reliability suite; off unless a test switches it on."""

    fail_after_records: int | None = None
    marker_dir: str | None = None  # a file here marks that the fault has fired once


PORT_RANGE = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?")
LOCAL_REPORTER_PORTS = (9249, 9259)  # metrics.prometheus_port's default, first to last


class MetricsSettings(Model):
    """Flink's Prometheus reporter, for the JVMs this job's settings configure (a local
    run's): each serves its metrics at http://127.0.0.1:<port>/metrics, taking the first
    free port of the range, so runs side by side do not collide. A cluster's JVMs take
    theirs from the cluster's own configuration (docs/operations.md, Watching a job)."""

    # a port or a range A-B; null: no reporter
    prometheus_port: str | None = "{}-{}".format(*LOCAL_REPORTER_PORTS)

    @field_validator("prometheus_port", mode="before")
    @classmethod
    def _port_or_range(cls, v: Any) -> Any:
        if v is None:
            return None
        text = str(v).strip()
        match = PORT_RANGE.fullmatch(text)
        low, high = (
            (int(match.group(1)), int(match.group(2) or match.group(1))) if match else (0, 0)
        )
        if not match or not 1024 <= low <= high <= 65535:
            raise ValueError(
                f"{text!r} is not a port or a range A-B of ports between 1024 and 65535"
            )
        return text


class JobSettings(Model):
    name: str
    parallelism: int = Field(default=1, ge=1)
    max_parallelism: int = Field(default=128, ge=1)
    # Chained operators hand a record on as the object itself instead of a copy (Flink's
    # pipeline.object-reuse): safe here, as no stage changes or keeps a record it emitted.
    object_reuse: bool = True
    # Resume from a retained checkpoint or savepoint (a path, or `latest` for the newest
    # retained checkpoint of this job).
    from_checkpoint: str | None = None


class Settings(Model):
    job: JobSettings
    kafka: KafkaConnection = Field(default_factory=KafkaConnection)
    source: SourceSettings
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    restart: RestartSettings = Field(default_factory=RestartSettings)
    sink: SinkSettings
    parse: ParseSettings = Field(default_factory=ParseSettings)
    errors: ErrorSettings = Field(default_factory=ErrorSettings)
    enrichment: EnrichmentSettings = Field(default_factory=EnrichmentSettings)
    python: PythonSettings = Field(default_factory=PythonSettings)
    watermarks: WatermarkSettings = Field(default_factory=WatermarkSettings)
    window: WindowSettings = Field(default_factory=WindowSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    beam: BeamSettings = Field(default_factory=BeamSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    @model_validator(mode="before")
    @classmethod
    def _execution_mode_follows_the_operator(cls, data: Any) -> Any:
        """Thread mode is the default (docs/performance.md, "Which mode, and why"): no data
        plane, no worker process, measured faster. PyFlink runs no AsyncFunction in it, so
        a job that chose the batched operator (one) and no mode runs in process mode rather
        than failing on a default it did not pick; one that names thread with it is refused
        (pipelines.lookups.enrichment)."""
        if not isinstance(data, dict):
            return data
        python = data.get("python")
        if python is not None and not isinstance(python, dict):
            return data  # a PythonSettings already made: its mode is what it says
        if python and "execution_mode" in python:
            return data
        enrichment = data.get("enrichment")
        operator = (
            enrichment.get("operator")
            if isinstance(enrichment, dict)
            else getattr(enrichment, "operator", None)
        )
        try:
            chosen = EnrichmentOperator(operator) if operator is not None else None
        except ValueError:
            return data  # the field's own validation says what is allowed
        if chosen is None or chosen is EnrichmentOperator.FLOWING:
            return data
        return {**data, "python": {**(python or {}), "execution_mode": ExecutionMode.PROCESS}}

    # Values the loader resolved from `${env:}`/`${file:}`: secrets wherever they sit
    # (secrets.secret_values), though their keys may not say so.
    _referenced: frozenset[str] = PrivateAttr(default_factory=frozenset)
    # The job's own sections (pipelines.settings.sections): validated, and as the merged
    # tree with references unresolved, which is what a pickled function may carry.
    _sections: dict[str, Any] = PrivateAttr(default_factory=dict)
    _section_trees: dict[str, Any] = PrivateAttr(default_factory=dict)
