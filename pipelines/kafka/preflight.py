"""Cross-field and broker-aware checks, run before every job start and by `pipelines doctor`.

Each rule here is a mistake that otherwise shows up only at run time, often much later:
a transaction timeout the broker refuses (InitProducerId fails at the first checkpoint),
a group that never commits, a topic that does not exist. Checks collect problems and never
raise mid-way, so one run reports all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipelines.kafka.clients import BrokerUnreachable, admin_client
from pipelines.settings import DeliveryGuarantee, Settings, StartMode, format_ms
from pipelines.settings.client_properties import librdkafka_config

BROKER_TX_MAX_KEY = "transaction.max.timeout.ms"
TX_LOG_REPLICATION_KEY = "transaction.state.log.replication.factor"
TX_LOG_MIN_ISR_KEY = "transaction.state.log.min.isr"


@dataclass(frozen=True)
class Problem:
    level: Literal["error", "warning"]
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.key}: {self.message}"


def static_problems(s: Settings) -> list[Problem]:
    """Rules that need only the settings."""
    out: list[Problem] = []
    cp, sink, src = s.checkpoint, s.sink, s.source
    if sink.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        if not cp.enabled:
            out.append(
                Problem(
                    "error",
                    "sink.delivery",
                    "exactly-once needs checkpointing: Kafka transactions commit only when "
                    "a checkpoint completes; set checkpoint.enabled: true or choose "
                    "sink.delivery: at-least-once",
                )
            )
        if not sink.transactional_id_prefix:
            out.append(
                Problem(
                    "error",
                    "sink.transactional_id_prefix",
                    "exactly-once needs a transactional id prefix that is unique per job "
                    "and stable across restarts",
                )
            )
        if cp.enabled and sink.transaction_timeout <= cp.interval + cp.timeout:
            out.append(
                Problem(
                    "error",
                    "sink.transaction_timeout",
                    f"{format_ms(sink.transaction_timeout)} must be greater than checkpoint.interval "
                    f"+ checkpoint.timeout ({format_ms(cp.interval)} + {format_ms(cp.timeout)} = "
                    f"{format_ms(cp.interval + cp.timeout)}), or the broker aborts transactions "
                    f"that a slow checkpoint has not committed yet",
                )
            )
    if src.start.mode is StartMode.GROUP_OFFSETS and not src.group_id:
        out.append(
            Problem(
                "error",
                "source.group_id",
                "start mode group-offsets needs a group id to read committed offsets from",
            )
        )
    if src.commit_offsets_on_checkpoint and not cp.enabled:
        out.append(
            Problem(
                "error",
                "source.commit_offsets_on_checkpoint",
                "offsets are committed only when a checkpoint completes, and checkpointing "
                "is off: enable checkpointing or set commit_offsets_on_checkpoint: false",
            )
        )
    elif src.commit_offsets_on_checkpoint and not src.group_id:
        out.append(
            Problem(
                "warning",
                "source.group_id",
                "no group id: the source will not commit offsets to Kafka, so lag cannot "
                "be monitored and group-offsets restarts start from the fallback",
            )
        )
    return out


def broker_problems(s: Settings, timeout_s: float = 5.0) -> list[Problem]:
    """Rules that ask the broker: reachability, topics, partitions, transaction limits."""
    try:
        admin = admin_client(
            s.kafka.bootstrap_servers,
            librdkafka_config(s.kafka),
            timeout_s,
            trusted=s.kafka.security.ssl_truststore_location,
        )
    except BrokerUnreachable as exc:
        return [Problem("error", exc.key, str(exc))]
    metadata = admin.list_topics(timeout=timeout_s)
    partitions = {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}
    sinks = _sink_topics(s)
    out = _topic_problems(s, partitions, sinks) + _parallelism_problems(s, partitions)
    exactly_once = s.sink.delivery is DeliveryGuarantee.EXACTLY_ONCE
    if len(metadata.brokers) > 1:  # a replicated cluster: can an acknowledged record be lost?
        out += _replication_problems(admin, metadata, partitions, sinks, exactly_once, timeout_s)
    if exactly_once:
        out += _transaction_limit_problems(s, admin, metadata, timeout_s)
    return out


def _sink_topics(s: Settings) -> list[tuple[str, str]]:
    """(key, topic) of every topic the job writes."""
    sinks = [("sink.topic", s.sink.topic)]
    if s.sink.dead_letter_topic:
        sinks.append(("sink.dead_letter_topic", s.sink.dead_letter_topic))
    if (
        s.window.late_topic
    ):  # any job that sets one, e.g. made by `pipelines-dev new --from windowed`
        sinks.append(("window.late_topic", s.window.late_topic))
    return sinks


def _topic_problems(
    s: Settings, partitions: dict[str, int], sinks: list[tuple[str, str]]
) -> list[Problem]:
    """Every topic the job reads or writes exists, and every specific offset's partition."""
    where = s.kafka.bootstrap_servers
    out = [
        Problem("error", "source.topics", f"topic {topic!r} does not exist on {where}")
        for topic in s.source.topics
        if topic not in partitions
    ]
    start = s.source.start
    for offset in start.offsets if start.mode is StartMode.SPECIFIC_OFFSETS else []:
        count = partitions.get(offset.topic)
        if count is None:
            out.append(
                Problem("error", "source.start.offsets", f"topic {offset.topic!r} does not exist")
            )
        elif offset.partition >= count:
            out.append(
                Problem(
                    "error",
                    "source.start.offsets",
                    f"{offset.topic}:{offset.partition} does not exist; the topic has "
                    f"partitions 0..{count - 1}",
                )
            )
    out += [
        Problem("error", key, f"topic {topic!r} does not exist on {where}")
        for key, topic in sinks
        if topic not in partitions
    ]
    return out


def _parallelism_problems(s: Settings, partitions: dict[str, int]) -> list[Problem]:
    """A parallelism above the source's partitions leaves subtasks idle."""
    topics = s.source.topics
    source_partitions = sum(partitions.get(t, 0) for t in topics)
    if not (topics and source_partitions and s.job.parallelism > source_partitions):
        return []
    return [
        Problem(
            "warning",
            "job.parallelism",
            f"{s.job.parallelism} is above the {source_partitions} partition(s) of "
            f"{', '.join(topics)}: {s.job.parallelism - source_partitions} source "
            f"subtask(s) will sit idle",
        )
    ]


def _replication_problems(admin, metadata, partitions, sinks, exactly_once, timeout_s):
    """durability_problems, with what it needs read from a replicated cluster."""
    from confluent_kafka.admin import ConfigResource

    written = {
        key: (
            topic,
            len(metadata.topics[topic].partitions[0].replicas),
            _topic_config(admin, topic, "min.insync.replicas", timeout_s, ConfigResource),
        )
        for key, topic in sinks
        if topic in partitions
    }
    tx_log = None
    if exactly_once:
        tx_log = (
            _broker_config(admin, metadata, TX_LOG_REPLICATION_KEY, timeout_s, ConfigResource),
            _broker_config(admin, metadata, TX_LOG_MIN_ISR_KEY, timeout_s, ConfigResource),
        )
    return durability_problems(len(metadata.brokers), written, tx_log)


def _transaction_limit_problems(s: Settings, admin, metadata, timeout_s: float) -> list[Problem]:
    """The sink's transaction timeout must be one the broker accepts."""
    from confluent_kafka.admin import ConfigResource

    broker_max = _broker_config(admin, metadata, BROKER_TX_MAX_KEY, timeout_s, ConfigResource)
    if broker_max is None or s.sink.transaction_timeout <= broker_max:
        return []
    return [
        Problem(
            "error",
            "sink.transaction_timeout",
            f"{s.sink.transaction_timeout} ms ({format_ms(s.sink.transaction_timeout)}) is "
            f"above the broker's {BROKER_TX_MAX_KEY}={broker_max} ({format_ms(broker_max)}): "
            f"the producer's InitProducerId would fail. Lower sink.transaction_timeout to at "
            f"most {broker_max}, or raise {BROKER_TX_MAX_KEY} on the broker",
        )
    ]


def durability_problems(
    brokers: int,
    written: dict[str, tuple[str, int, int | None]],
    tx_log: tuple[int | None, int | None] | None,
) -> list[Problem]:
    """On a cluster of `brokers`: where an acknowledged record could be lost, or writes stop
    when one broker is down. `written`: setting key -> (topic the job writes, its replica
    count, its min.insync.replicas); `tx_log`: the broker's transaction log replication
    and min ISR (exactly-once sinks only).

    The sinks produce with acks=all, which waits for min.insync.replicas replicas: with one,
    a record only the leader had is gone when that broker is; with as many as there are
    replicas, one broker down stops every write."""
    out = []
    for key, (topic, replicas, min_isr) in written.items():
        if replicas < 2:
            out.append(
                Problem(
                    "warning",
                    key,
                    f"topic {topic!r} has {replicas} replica on a cluster of {brokers} brokers: "
                    f"its records are lost with that broker; create it with replication factor "
                    f"{min(3, brokers)}",
                )
            )
        elif min_isr is not None and min_isr < 2:
            out.append(
                Problem(
                    "warning",
                    key,
                    f"topic {topic!r} has min.insync.replicas={min_isr}: acks=all then waits for "
                    f"the leader alone, and a record only the leader had is lost when that broker "
                    f"fails; set min.insync.replicas=2 (with {replicas} replicas)",
                )
            )
        elif min_isr is not None and min_isr >= replicas:
            out.append(
                Problem(
                    "warning",
                    key,
                    f"topic {topic!r} has min.insync.replicas={min_isr} and {replicas} replicas: "
                    f"every write fails while one of its brokers is down; set "
                    f"min.insync.replicas={replicas - 1}",
                )
            )
    if tx_log is not None:
        replication, min_isr = tx_log
        if replication is not None and replication < min(3, brokers):
            out.append(
                Problem(
                    "warning",
                    "sink.delivery",
                    f"the brokers' {TX_LOG_REPLICATION_KEY}={replication} on a cluster of "
                    f"{brokers}: a transaction's state (and whether it committed) is lost with "
                    f"{'that broker' if replication == 1 else 'those brokers'}; set it to "
                    f"{min(3, brokers)} before the first transaction",
                )
            )
        elif min_isr is not None and min_isr < 2:
            out.append(
                Problem(
                    "warning",
                    "sink.delivery",
                    f"the brokers' {TX_LOG_MIN_ISR_KEY}={min_isr}: a commit acknowledged by one "
                    f"replica of the transaction log is lost with that broker; set it to 2",
                )
            )
    return out


def _topic_config(admin, topic: str, key: str, timeout_s: float, resource_cls) -> int | None:
    resource = resource_cls("topic", topic)
    try:
        entry = (
            admin.describe_configs([resource], request_timeout=timeout_s)[resource]
            .result(timeout=timeout_s)
            .get(key)
        )
    except Exception:  # noqa: BLE001 - not allowed to describe: nothing to say
        return None
    return int(entry.value) if entry is not None and entry.value is not None else None


def _broker_config(admin, metadata, key: str, timeout_s: float, resource_cls) -> int | None:
    broker_id = sorted(metadata.brokers)[0]
    futures = admin.describe_configs(
        [resource_cls("broker", str(broker_id))], request_timeout=timeout_s
    )
    for future in futures.values():
        try:
            entry = future.result(timeout=timeout_s).get(key)
        except Exception:
            return None
        return int(entry.value) if entry is not None and entry.value is not None else None
    return None


def service_problems(client, timeout_s: float = 5.0) -> list[Problem]:
    """The job's lookup service must answer, if its client can tell (`check`, see
    pipelines.lookups): otherwise every lookup fails and, under any policy, the job's
    output is not what the user expects; better to say so before starting."""
    check = getattr(client, "check", None)
    found = check(timeout_s) if callable(check) else None
    return [Problem("error", *found)] if found else []


def run_preflight(
    settings: Settings, broker: bool = True, uses: tuple[str, ...] | set[str] = (), client=None
) -> list[Problem]:
    """All rules; `uses` names the external services the job calls ("enrichment"),
    `client` is its enrichment client (pipelines.lookups), if it has one."""
    problems = static_problems(settings)
    if broker:
        problems += broker_problems(settings)
    if "enrichment" in uses and client is not None:
        problems += service_problems(client)
    return problems


def has_errors(problems: list[Problem]) -> bool:
    return any(p.level == "error" for p in problems)
