"""Typed job settings and the layered loader that builds them.

Everything a Java/Scala job used to hand-code (start modes, checkpointing, the
transactional sink, async enrichment, watermarks) is a field here, validated once,
before anything touches Flink. Layers, lowest first:

    defaults in code < conf/base/<job>.yaml < conf/<env>/<job>.yaml
    < conf/local/<job>.yaml (git-ignored) < PIPELINES__SECTION__KEY env vars < --set key=value

Every leaf value remembers which layer set it, so an error can name the file and the
key, and `pipelines config show` can say where each value came from.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF_DIR = PROJECT_ROOT / "conf"
ENV_PREFIX = "PIPELINES__"
DEFAULT_SOURCE = "default"


class ConfigError(Exception):
    """A configuration that cannot run. The message names the file, the key and what is allowed."""


# --------------------------------------------------------------------------- durations

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
            "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: Any) -> int:
    """Accept `500ms`, `10s`, `5min`, `1h`, `2d` or a whole number of milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500ms, 10s, 5min, 1h")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return int(match.group(1)) * _UNIT_MS[match.group(2)]
    raise ValueError(f"{value!r} is not a duration; use e.g. 500ms, 10s, 5min, 1h or milliseconds")


def format_ms(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


DURATION_FIELDS: set[str] = set()


def _duration_fields(*names: str):
    DURATION_FIELDS.update(names)
    return field_validator(*names, mode="before")(lambda cls, v: None if v is None else parse_duration_ms(v))


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


class KafkaSecurity(_Model):
    """Secrets never sit in committed files: write `${env:NAME}` or `${file:path}`."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: SecretStr | None = None
    ssl_truststore_location: str | None = None
    ssl_truststore_password: SecretStr | None = None

    @model_validator(mode="after")
    def _sasl_complete(self) -> "KafkaSecurity":
        if self.protocol.value.startswith("SASL") and not (
            self.sasl_mechanism and self.username and self.password
        ):
            raise ValueError(
                "SASL needs sasl_mechanism, username and password "
                "(password as ${env:NAME} or ${file:path})"
            )
        return self


class KafkaConnection(_Model):
    bootstrap_servers: str = "127.0.0.1:9092"
    properties: dict[str, str] = Field(default_factory=dict)
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)

    @field_validator("properties", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): str(val).lower() if isinstance(val, bool) else str(val)
                    for k, val in v.items()}
        return v

    def client_properties(self) -> dict[str, str]:
        """Kafka client properties with secrets revealed: for Flink and admin clients only."""
        props = dict(self.properties)
        sec = self.security
        props["security.protocol"] = sec.protocol.value
        if sec.sasl_mechanism and sec.username and sec.password:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if sec.sasl_mechanism is SaslMechanism.PLAIN
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            props["sasl.mechanism"] = sec.sasl_mechanism.value
            props["sasl.jaas.config"] = (
                f'{module} required username="{sec.username}" '
                f'password="{sec.password.get_secret_value()}";'
            )
        if sec.ssl_truststore_location:
            props["ssl.truststore.location"] = sec.ssl_truststore_location
        if sec.ssl_truststore_password:
            props["ssl.truststore.password"] = sec.ssl_truststore_password.get_secret_value()
        return props

    def admin_config(self) -> dict[str, str]:
        """The same connection for confluent-kafka (librdkafka spells a few keys differently)."""
        conf = {"bootstrap.servers": self.bootstrap_servers}
        sec = self.security
        conf["security.protocol"] = sec.protocol.value
        if sec.sasl_mechanism and sec.username and sec.password:
            conf["sasl.mechanism"] = sec.sasl_mechanism.value
            conf["sasl.username"] = sec.username
            conf["sasl.password"] = sec.password.get_secret_value()
        if sec.ssl_truststore_location:
            conf["ssl.ca.location"] = sec.ssl_truststore_location
        return conf


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


class PartitionOffset(_Model):
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class StartPosition(_Model):
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


class SourceSettings(_Model):
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

    _dur = _duration_fields("partition_discovery_interval")

    _props = field_validator("properties", mode="before")(
        lambda cls, v: KafkaConnection._stringify(v))

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
    RETAIN = "retain"   # keep the last checkpoint when the job is cancelled: it can be resumed
    DELETE = "delete"   # drop it on cancellation; kept only when the job fails


class CheckpointSettings(_Model):
    enabled: bool = True
    interval: int = Field(default=10_000, ge=10)
    mode: CheckpointMode = CheckpointMode.EXACTLY_ONCE
    min_pause: int = 500
    timeout: int = Field(default=120_000, ge=10)
    max_concurrent: int = Field(default=1, ge=1)
    tolerable_failures: int = Field(default=0, ge=0)
    retention: Retention = Retention.RETAIN
    # `{job}` is replaced by the job name, so jobs never share a checkpoint directory.
    storage: str = "file://" + str(PROJECT_ROOT / ".local" / "checkpoints" / "{job}")
    savepoints: str = "file://" + str(PROJECT_ROOT / ".local" / "savepoints" / "{job}")
    unaligned: bool = False

    _dur = _duration_fields("interval", "min_pause", "timeout")

    @model_validator(mode="after")
    def _unaligned_needs_exactly_once(self) -> "CheckpointSettings":
        if self.unaligned and self.mode is CheckpointMode.AT_LEAST_ONCE:
            raise ValueError("unaligned checkpoints need mode exactly-once "
                             "(Flink ignores them under at-least-once)")
        return self

    @field_validator("storage", "savepoints")
    @classmethod
    def _uri(cls, v: str) -> str:
        if "://" not in v:
            if not v.startswith("/"):
                raise ValueError(f"{v!r} must be a URI (file:///..., s3://...) or an absolute path")
            return "file://" + v
        return v


class RestartStrategy(str, Enum):
    FIXED_DELAY = "fixed-delay"
    EXPONENTIAL_DELAY = "exponential-delay"
    NONE = "none"


class RestartSettings(_Model):
    strategy: RestartStrategy = RestartStrategy.FIXED_DELAY
    attempts: int = Field(default=3, ge=0)
    delay: int = 2_000
    max_delay: int = 60_000

    _dur = _duration_fields("delay", "max_delay")


# --------------------------------------------------------------------------- sink

class DeliveryGuarantee(str, Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


class SinkSettings(_Model):
    topic: str
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    transactional_id_prefix: str | None = None
    # Must exceed checkpoint interval + timeout and stay within the broker's
    # transaction.max.timeout.ms (900000 by default); Flink's own default (1 h) does not.
    transaction_timeout: int = 600_000
    dead_letter_topic: str | None = None
    # Largest dead-letter message; null: the producer's max.request.size (kafka.properties,
    # Kafka's default 1 MiB). Larger originals are truncated, their size and digest kept.
    dead_letter_max_bytes: int | None = Field(default=None, ge=16_384)

    _dur = _duration_fields("transaction_timeout")

    def max_record_bytes(self, kafka: "KafkaConnection") -> int:
        """What one record written by this job's sinks may weigh."""
        return int(kafka.properties.get("max.request.size", 1_048_576))

    def dead_letter_bytes(self, kafka: "KafkaConnection") -> int:
        return min(self.dead_letter_max_bytes or 1 << 62, self.max_record_bytes(kafka))


# --------------------------------------------------------------------------- enrichment

class OnFailure(str, Enum):
    DEAD_LETTER = "dead-letter"    # the record goes to dead letters with the reason: replayable
    MARK_MISSING = "mark-missing"  # emit the record with enrichment missing and why
    FAIL = "fail"                  # fail the job (the restart strategy decides what next)


class EnrichmentOperator(str, Enum):
    BATCHED = "batched"  # the project's operator: records cross into Python in batches
    ASYNC = "async"      # PyFlink's AsyncDataStream per record, as documented (a timeout per record)
    SYNC = "sync"        # a blocking lookup per record: the reports' way, for comparison only


class EnrichmentSettings(_Model):
    url: str = "http://127.0.0.1:8765"
    operator: EnrichmentOperator = EnrichmentOperator.BATCHED
    batch_size: int = Field(default=100, ge=1)
    batch_delay: int = 20  # longest a partial batch waits before it is sent on
    trace_timing: bool = False  # add _timing {in, out} (epoch ms) to each output record
    # batched: lookups of one batch share one POST {url}/lookup/batch round trip
    coalesce: bool = False
    capacity: int = Field(default=100, ge=1)
    timeout: int = Field(default=2_000, ge=1)
    retries: int = Field(default=2, ge=0)
    backoff: int = 100
    ordered: bool = False
    # After the retries of a transient failure (timeout, connection, 5xx). A permanent
    # failure (the service says the record cannot be enriched, e.g. 4xx) always dead-letters.
    on_failure: OnFailure = OnFailure.DEAD_LETTER
    # Preflight: the service must answer here (any HTTP status counts); null: `url`.
    health_url: str | None = None

    _dur = _duration_fields("timeout", "backoff", "batch_delay")

    def effective_batch_size(self) -> int:
        """A batch never holds more records than may be in flight at once."""
        return min(self.batch_size, self.capacity)

    def elements_in_flight(self) -> int:
        """Stream elements the async stage holds (records, or batches of them): a checkpoint
        waits for these. Batches x batch size never exceeds `capacity`."""
        if self.operator is EnrichmentOperator.BATCHED:
            return max(1, self.capacity // self.effective_batch_size())
        return self.capacity


class PythonSettings(_Model):
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

    _dur = _duration_fields("bundle_time", "batch_delay")


class WatermarkSettings(_Model):
    max_out_of_orderness: int = 5_000
    idleness: int | None = 30_000  # null switches idleness off
    event_time_field: str = "ts"

    _dur = _duration_fields("max_out_of_orderness", "idleness")


class WindowSettings(_Model):
    size: int = Field(default=10_000, ge=1)
    allowed_lateness: int = 0
    key_field: str = "key"
    late_topic: str | None = None

    _dur = _duration_fields("size", "allowed_lateness")


class FieldType(str, Enum):
    ANY = "any"          # present and not null
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    OBJECT = "object"
    ARRAY = "array"


class ParseSettings(_Model):
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


class ErrorSettings(_Model):
    """An unexpected exception for one record sends that record to dead letters; this many
    in a row, with no record getting through in between, is a bug, and fails the job."""

    max_unexpected_in_a_row: int = Field(default=100, ge=1)


class FaultSettings(_Model):
    """Fault injection for the reliability suite; off unless a test switches it on."""

    fail_after_records: int | None = None
    marker_dir: str | None = None  # a file here marks that the fault has fired once


class JobSettings(_Model):
    name: str
    parallelism: int = Field(default=1, ge=1)
    max_parallelism: int = Field(default=128, ge=1)
    # Resume from a retained checkpoint or savepoint (a path, or `latest` for the newest
    # retained checkpoint of this job).
    from_checkpoint: str | None = None


class Settings(_Model):
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


# --------------------------------------------------------------------------- loading

_SECRET_REF = re.compile(r"^\$\{(env|file):([^}]+)\}$")
_SECRET_KEY = re.compile(r"(password|secret|jaas|token|credential|(^|[._])key$)", re.I)


def is_secret_key(dotted: str) -> bool:
    return bool(_SECRET_KEY.search(dotted.split(".")[-1])) or "sasl.jaas.config" in dotted


class Loaded:
    """Validated settings plus, for each leaf key, the layer that set it."""

    def __init__(self, settings: Settings, sources: dict[str, str], raw: dict[str, Any]):
        self.settings = settings
        self.sources = sources
        self.raw = raw


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and not dotted.endswith("properties"):
            flat.update(_flatten(value, dotted + "."))
        elif isinstance(value, dict) and dotted.endswith("properties"):
            for k, v in value.items():
                flat[f"{dotted}.{k}"] = v
        else:
            flat[dotted] = value
    return flat


def _merge(base: dict[str, Any], overlay: dict[str, Any], origin: str,
           sources: dict[str, str], prefix: str = "") -> None:
    for key, value in overlay.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, origin, sources, dotted + ".")
        else:
            base[key] = value
            if isinstance(value, dict):
                for leaf in _flatten(value, dotted + "."):
                    sources[leaf] = origin
            sources[dotted] = origin


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    # Kafka property names contain dots: everything after `properties.` is one key.
    if "properties" in parts:
        i = parts.index("properties")
        parts = parts[: i + 1] + [".".join(parts[i + 1:])] if i + 1 < len(parts) else parts
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
    node[parts[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{_rel(path)}:{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{_rel(path)}: the top level must be a mapping of sections, "
                          f"not {type(data).__name__}")
    return data


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _scalar(text: str) -> Any:
    """`--set` and env values are YAML scalars: 3 is an int, true a bool, [a,b] a list."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _value_for(dotted: str, text: str) -> Any:
    """A secret is the text as given: YAML would turn `12345678` into a number (then echo
    it in a type error) and `0123` into 83."""
    return text if is_secret_key(dotted) else _scalar(text)


def _resolve_secret_refs(tree: Any, sources: dict[str, str], prefix: str = "") -> Any:
    if isinstance(tree, dict):
        return {k: _resolve_secret_refs(v, sources, f"{prefix}{k}.") for k, v in tree.items()}
    if isinstance(tree, str):
        match = _SECRET_REF.match(tree.strip())
        if match:
            kind, name = match.groups()
            key = prefix.rstrip(".")
            origin = sources.get(key, DEFAULT_SOURCE)
            if kind == "env":
                if name not in os.environ:
                    raise ConfigError(f"{origin}: {key}: environment variable {name} is not set")
                sources[key] = f"{origin} -> env {name}"
                return os.environ[name]
            path = Path(name).expanduser()
            if not path.is_file():
                raise ConfigError(f"{origin}: {key}: secret file {name} does not exist")
            sources[key] = f"{origin} -> file {name}"
            try:
                return path.read_text(encoding="utf-8").strip()
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{origin}: {key}: secret file {name} is not UTF-8 text "
                                  f"(byte {exc.start}); write the secret as text") from None
            except OSError as exc:
                raise ConfigError(f"{origin}: {key}: secret file {name} cannot be read: "
                                  f"{exc.strerror}") from None
    return tree


def _allowed_for(model: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """What a key may hold, for messages: the enum values or the section's known keys."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            names = ", ".join(sorted(fields)) if fields else None
            return f"known keys here: {names}" if names else None
        annotation = fields[part].annotation
        current = _unwrap(annotation)
    if isinstance(current, type) and issubclass(current, Enum):
        return "allowed: " + ", ".join(m.value for m in current)
    return None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if args:
        for arg in args:
            inner = _unwrap(arg)
            if isinstance(inner, type) and (issubclass(inner, (BaseModel, Enum))):
                return inner
    return annotation


def _explain(exc: ValidationError, sources: dict[str, str]) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc)
        etype = err["type"]
        if etype == "extra_forbidden":
            section = loc[:-1]
            allowed = _allowed_for(Settings, section + ("\0",)) or ""
            msg = f"unknown key; {allowed}"
        elif etype == "missing":
            msg = "required but not set"
        elif etype == "enum":
            allowed = _allowed_for(Settings, loc) or ""
            msg = f"{err.get('input')!r} is not allowed; {allowed}"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if is_secret_key(key):
                msg = f"{msg} (value not shown: it is a secret; quote it in YAML)"
            elif "input" in err and etype not in ("value_error",) and not isinstance(err["input"], dict):
                msg = f"{msg} (got {err['input']!r})"
        origin = _origin_of(key, sources)
        lines.append(f"{origin}: {key}: {msg}")
    return "\n".join(lines)


def _origin_of(key: str, sources: dict[str, str]) -> str:
    probe = key
    while probe:
        if probe in sources:
            return sources[probe]
        probe = probe.rpartition(".")[0]
    # a section-level problem: name the files that touched the section
    touched = sorted({v for k, v in sources.items() if k.startswith(key + ".")})
    return " + ".join(touched) if touched else DEFAULT_SOURCE


def load_settings(
    job: str,
    env: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    conf_dir: Path | str | None = None,
    environ: dict[str, str] | None = None,
) -> Loaded:
    """Build validated settings for `job` from every layer; raise ConfigError otherwise."""
    conf = Path(conf_dir) if conf_dir else Path(os.environ.get("PIPELINES_CONF_DIR", DEFAULT_CONF_DIR))
    environ = os.environ if environ is None else environ
    tree: dict[str, Any] = {"job": {"name": job}}
    sources: dict[str, str] = {"job.name": DEFAULT_SOURCE}

    base = conf / "base" / f"{job}.yaml"
    if not base.is_file():
        known = sorted(p.stem for p in (conf / "base").glob("*.yaml"))
        raise ConfigError(f"{_rel(base)}: no such job config; jobs with a config: "
                          f"{', '.join(known) or 'none'}")
    layers = [base]
    if env:
        overlay = conf / env / f"{job}.yaml"
        if not overlay.is_file():
            envs = sorted(p.name for p in conf.iterdir() if p.is_dir() and p.name not in ("base", "local"))
            raise ConfigError(f"{_rel(overlay)}: no overlay for env {env!r}; "
                              f"envs with a {job}.yaml: "
                              f"{', '.join(e for e in envs if (conf / e / f'{job}.yaml').is_file()) or 'none'}")
        layers.append(overlay)
    local = conf / "local" / f"{job}.yaml"
    if local.is_file():
        layers.append(local)
    for path in layers:
        _merge(tree, _read_yaml(path), _rel(path), sources)

    for name in sorted(environ):
        if name.startswith(ENV_PREFIX):
            dotted = name[len(ENV_PREFIX):].lower().replace("__", ".")
            piece: dict[str, Any] = {}
            _set_dotted(piece, dotted, _value_for(dotted, environ[name]))
            _merge(tree, piece, f"env {name}", sources)

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item}: expected key=value, e.g. --set source.group_id=my-group")
        key, _, value = item.partition("=")
        piece = {}
        _set_dotted(piece, key.strip(), _value_for(key.strip(), value))
        _merge(tree, piece, "--set", sources)

    resolved = _resolve_secret_refs(tree, sources)
    try:
        settings = Settings.model_validate(resolved)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, sources)) from None
    KNOWN_SECRETS.update(v for v in secret_values(settings) if v)
    if settings.job.name != job:
        raise ConfigError(f"{sources.get('job.name')}: job.name: {settings.job.name!r} must match "
                          f"the job being run ({job!r})")
    return Loaded(settings, sources, resolved)


def effective_view(loaded: Loaded) -> list[tuple[str, str, str]]:
    """(key, value, where it came from) for every leaf, secrets masked: for printing."""
    dumped = loaded.settings.model_dump(mode="json")
    rows = []
    for key, value in sorted(_flatten(dumped).items()):
        shown = mask_value(key, value)
        rows.append((key, shown, _origin_of(key, loaded.sources) if key in loaded.sources
                     or any(k.startswith(key) for k in loaded.sources) else DEFAULT_SOURCE))
    return rows


def mask_value(key: str, value: Any) -> str:
    if value is None:
        return "null"
    if is_secret_key(key) or (isinstance(value, str) and value == "**********"):
        return "******" if value not in ("", None) else ""
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    if isinstance(value, int) and key.rsplit(".", 1)[-1] in DURATION_FIELDS:
        return format_ms(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


# Every secret value any loaded config held, so error printouts can mask them.
KNOWN_SECRETS: set[str] = set()


def mask_text(text: str, secrets: list[str] | None = None) -> str:
    """Remove secret values from free text (log lines, exception messages)."""
    for secret in sorted({*(secrets or ()), *KNOWN_SECRETS}, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "******")
    return text


def secret_values(settings: Settings) -> list[str]:
    sec = settings.kafka.security
    values = [s.get_secret_value() for s in (sec.password, sec.ssl_truststore_password) if s]
    values += [v for k, v in settings.kafka.properties.items() if is_secret_key(k)]
    return values
