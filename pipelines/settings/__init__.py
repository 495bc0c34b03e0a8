"""Typed job settings and the layered loader that builds them.

Everything a Java/Scala job used to hand-code (start modes, checkpointing, the
transactional sink, async enrichment, watermarks) is a field here, validated once,
before anything touches Flink. By concern:

- values.py: durations and the base model; ConfigError;
- schema.py: the sections and their rules;
- loader.py: layers merged with provenance, `load_settings`, `effective_view`;
- sections.py: a job's own sections (JobSection), loaded beside the project's;
- secrets.py: secret keys, `${env:}`/`${file:}` references, SecretMask;
- kafka_clients.py: the `kafka:` section as the Java clients and librdkafka want it.

`from pipelines.settings import Settings, load_settings` is all most code needs.
"""

from pipelines.settings.loader import ENV_PREFIX, Loaded, effective_view, load_settings
from pipelines.settings.schema import (
    BeamRunner,
    BeamSettings,
    CheckpointMode,
    CheckpointSettings,
    DeliveryGuarantee,
    EnrichmentOperator,
    EnrichmentSettings,
    ErrorSettings,
    ExecutionMode,
    FaultSettings,
    FieldType,
    IsolationLevel,
    JobSettings,
    KafkaConnection,
    KafkaSecurity,
    MetricsSettings,
    OffsetReset,
    OnFailure,
    ParseSettings,
    PartitionOffset,
    PythonSettings,
    RestartSettings,
    RestartStrategy,
    Retention,
    SaslMechanism,
    SecurityProtocol,
    Settings,
    SinkSettings,
    SourceSettings,
    StartMode,
    StartPosition,
    StoreType,
    WatermarkSettings,
    WindowSettings,
)
from pipelines.settings.secrets import SecretMask, is_secret_key, mask_value, secret_values
from pipelines.settings.sections import JobSection
from pipelines.settings.values import DURATION_FIELDS, ConfigError, format_ms, parse_duration_ms

__all__ = [
    "BeamRunner",
    "BeamSettings",
    "ENV_PREFIX",
    "Loaded",
    "effective_view",
    "load_settings",
    "CheckpointMode",
    "CheckpointSettings",
    "DeliveryGuarantee",
    "EnrichmentOperator",
    "EnrichmentSettings",
    "ErrorSettings",
    "ExecutionMode",
    "FaultSettings",
    "FieldType",
    "IsolationLevel",
    "JobSettings",
    "KafkaConnection",
    "KafkaSecurity",
    "MetricsSettings",
    "OffsetReset",
    "OnFailure",
    "ParseSettings",
    "PartitionOffset",
    "PythonSettings",
    "RestartSettings",
    "RestartStrategy",
    "Retention",
    "SaslMechanism",
    "SecurityProtocol",
    "StoreType",
    "Settings",
    "SinkSettings",
    "SourceSettings",
    "StartMode",
    "StartPosition",
    "WatermarkSettings",
    "WindowSettings",
    "JobSection",
    "SecretMask",
    "is_secret_key",
    "mask_value",
    "secret_values",
    "DURATION_FIELDS",
    "ConfigError",
    "format_ms",
    "parse_duration_ms",
]
