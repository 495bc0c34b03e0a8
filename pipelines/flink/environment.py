"""Settings -> StreamExecutionEnvironment: checkpointing, restarts, interpreter, jars.

Everything is expressed as Flink configuration keys, so the same job behaves the same on
the local mini-cluster and under `flink run`, where the cluster's config is the base.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

from pipelines.flink.jobmanager import JOB_PARAMETER, PREFIX_PARAMETER, SAVEPOINT_PARAMETER
from pipelines.flink.libpython import check_shared_libpython, embedded_python_path
from pipelines.host import jars, paths
from pipelines.settings import ExecutionMode, RestartStrategy, Retention, Settings


def _ms(value: int) -> str:
    return f"{value} ms"


def checkpoint_dir(settings: Settings) -> str:
    """`checkpoint.storage` for this job, or (unset) `checkpoints/<job>` under the state
    root (paths.state_root: never inside a package, which a later `package` replaces):
    resolved here, at run time, never written into a packaged config."""
    uri = settings.checkpoint.storage or "file://" + str(paths.state_root() / "checkpoints/{job}")
    return uri.replace("{job}", settings.job.name)


def savepoint_dir(settings: Settings) -> str:
    uri = settings.checkpoint.savepoints or "file://" + str(paths.state_root() / "savepoints/{job}")
    return uri.replace("{job}", settings.job.name)


def transactional_identity(settings: Settings) -> str:
    """What makes two running copies of a job collide: the sink's transactional-id prefix
    (exactly-once), else the job's name."""
    return settings.sink.transactional_id_prefix or f"job:{settings.job.name}"


def _flink_map(entries: dict[str, str]) -> str:
    """A Flink map option's text, `k:v,...`: values are percent-encoded (Flink's splitter
    takes no `:` or `,` inside an entry), and pipelines.flink.jobmanager decodes them."""
    return ",".join(f"{k}:{quote(v, safe='')}" for k, v in entries.items())


# Flink's options that choose the address a listener binds (each defaults to every
# interface): the REST server; the JobManager's RPC and blob server; the TaskManager's RPC
# and data (shuffle) server. Its Prometheus reporter and flink-python's Beam services have
# none (docs/security.md).
FLINK_BIND_OPTIONS = ("rest.bind-address", "jobmanager.bind-host", "taskmanager.bind-host")

# A local mini-cluster's listeners: on loopback, the REST port free-chosen.
MINI_CLUSTER_ON_LOOPBACK = {
    "rest.bind-port": "0",
    "rest.address": "127.0.0.1",
    **{key: "127.0.0.1" for key in FLINK_BIND_OPTIONS},
    "jobmanager.rpc.address": "127.0.0.1",
    "taskmanager.host": "127.0.0.1",
}

FLINK_DEFAULT_BUNDLE_SIZE = 1000
PROMETHEUS_REPORTER = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"


def python_bundle_size(settings: Settings, uses: tuple[str, ...] | list[str] = ()) -> int:
    """Records per Python bundle: a checkpoint waits for the open one. Behind slow lookups
    it is sized to the enrichment stage's elements in flight (one round of lookups per
    bundle); a job without enrichment keeps Flink's default. Sizing every job that way gave
    `passthrough` bundles of one record: each crossed into Python alone (335 records/s)."""
    if settings.python.bundle_size:
        return settings.python.bundle_size
    if "enrichment" in uses:
        return settings.enrichment.elements_in_flight()
    return FLINK_DEFAULT_BUNDLE_SIZE


def flink_configuration(
    settings: Settings,
    jar_paths: list[Path] | None = None,
    python: str | None = None,
    uses: tuple[str, ...] | list[str] = (),
) -> dict[str, str]:
    """The Flink configuration a job runs with, as plain key/value strings; `uses` names
    the external services the job calls, as its build wired them
    (pipelines.running.wiring)."""
    python = python or sys.executable
    conf: dict[str, str] = {
        "pipeline.name": settings.job.name,
        "parallelism.default": str(settings.job.parallelism),
        "pipeline.max-parallelism": str(settings.job.max_parallelism),
        "pipeline.object-reuse": str(settings.job.object_reuse).lower(),
        # Without these Flink starts the system `python`: "No module named 'pyflink'".
        "python.executable": python,
        "python.client.executable": python,
        "execution.checkpointing.dir": checkpoint_dir(settings),
        "execution.checkpointing.savepoint-dir": savepoint_dir(settings),
        "execution.checkpointing.storage": "filesystem",
        "python.fn-execution.bundle.size": str(python_bundle_size(settings, uses)),
        "python.fn-execution.bundle.time": str(settings.python.bundle_time),  # a long, in ms
        # Shown by the REST API (/jobs/<id>/config): `run` and `submit` find a running
        # copy of this job by them, `jobs stop` its savepoint dir (pipelines.flink.jobmanager).
        "pipeline.global-job-parameters": _flink_map(
            {
                JOB_PARAMETER: settings.job.name,
                PREFIX_PARAMETER: transactional_identity(settings),
                SAVEPOINT_PARAMETER: savepoint_dir(settings),
            }
        ),
    }
    # Always set: a gateway that ran a thread-mode job keeps the mode for the next job.
    conf["python.execution-mode"] = settings.python.execution_mode.value
    if settings.python.execution_mode is ExecutionMode.THREAD:
        conf["python.pythonpath"] = embedded_python_path(python)
    conf.update(checkpoint_options(settings.checkpoint))
    conf.update(restart_options(settings.restart))
    if settings.metrics.prometheus_port:
        # The wheel's plugins/metrics-prometheus: a cluster loads it from plugins/, a local
        # run's mini-cluster from its class path (flink/gateway.py with_reporters). Its HTTP
        # server binds every interface: the JVMs the project starts run under the loopback
        # shim (pipelines.host.loopback), which makes it 127.0.0.1.
        conf["metrics.reporter.prom.factory.class"] = PROMETHEUS_REPORTER
        conf["metrics.reporter.prom.port"] = settings.metrics.prometheus_port
    if settings.job.from_checkpoint:
        conf["execution.state-recovery.path"] = settings.job.from_checkpoint
    if jar_paths:
        conf["pipeline.jars"] = ";".join(p.resolve().as_uri() for p in jar_paths)
    return conf


def checkpoint_options(cp) -> dict[str, str]:
    """Flink's checkpointing options from the `checkpoint:` settings (none when disabled)."""
    if not cp.enabled:
        return {}
    return {
        "execution.checkpointing.interval": _ms(cp.interval),
        "execution.checkpointing.mode": cp.mode.name,
        "execution.checkpointing.min-pause": _ms(cp.min_pause),
        "execution.checkpointing.timeout": _ms(cp.timeout),
        "execution.checkpointing.max-concurrent-checkpoints": str(cp.max_concurrent),
        "execution.checkpointing.tolerable-failed-checkpoints": str(cp.tolerable_failures),
        "execution.checkpointing.externalized-checkpoint-retention": (
            "RETAIN_ON_CANCELLATION"
            if cp.retention is Retention.RETAIN
            else "DELETE_ON_CANCELLATION"
        ),
        "execution.checkpointing.unaligned.enabled": str(cp.unaligned).lower(),
    }


def restart_options(rs) -> dict[str, str]:
    """Flink's restart strategy from the `restart:` settings."""
    if rs.strategy is RestartStrategy.NONE:
        return {"restart-strategy.type": "none"}
    if rs.strategy is RestartStrategy.FIXED_DELAY:
        return {
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(rs.attempts),
            "restart-strategy.fixed-delay.delay": _ms(rs.delay),
        }
    return {
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": _ms(rs.delay),
        "restart-strategy.exponential-delay.max-backoff": _ms(rs.max_delay),
        "restart-strategy.exponential-delay.attempts-before-reset-backoff": str(rs.attempts),
    }


def create_environment(
    settings: Settings, extra: dict[str, str] | None = None, uses: tuple[str, ...] | list[str] = ()
):
    """A StreamExecutionEnvironment configured from settings, jars checked first."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    conf = Configuration()
    # Under `flink run`, -pyexec names the TaskManagers' python (e.g. a container's venv),
    # which may not exist where this client runs: kept. Elsewhere, this python.
    given = StreamExecutionEnvironment.get_execution_environment()._j_stream_execution_environment
    python = given.getConfiguration().toMap().get("python.executable")
    flink_conf = flink_configuration(settings, jars.resolve(), python=python, uses=uses)
    if settings.python.execution_mode is ExecutionMode.THREAD:
        check_shared_libpython(python)
    flink_conf["python.client.executable"] = sys.executable
    for key, value in {**flink_conf, **(extra or {})}.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    # get_execution_environment(conf) on a running client context (flink run) keeps the
    # cluster's settings; configure() applies ours on top in both cases.
    env.configure(conf)
    return env
