"""Settings as Flink itself reports them: the Java-side checkpoint config and configuration."""

from __future__ import annotations

import sys

import pytest

from pipelines.flink.environment import create_environment, flink_configuration
from pipelines.running import registry
from pipelines.settings import load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def env():
    settings = load_settings(
        "enrich",
        sections=registry.load("enrich").sections,
        environ={},
        overrides=[
            "checkpoint.interval=7s",
            "checkpoint.min_pause=1500ms",
            "checkpoint.timeout=3min",
            "checkpoint.max_concurrent=2",
            "checkpoint.tolerable_failures=4",
            "checkpoint.mode=exactly-once",
            "checkpoint.unaligned=true",
            "checkpoint.retention=retain",
            "job.parallelism=2",
            "restart.strategy=fixed-delay",
            "restart.attempts=5",
            "restart.delay=3s",
        ],
    ).settings
    return create_environment(settings)


def test_checkpoint_config_reaches_the_java_side(env):
    j_config = env.get_checkpoint_config()._j_checkpoint_config
    assert j_config.getCheckpointInterval() == 7000
    assert j_config.getMinPauseBetweenCheckpoints() == 1500
    assert j_config.getCheckpointTimeout() == 180_000
    assert j_config.getMaxConcurrentCheckpoints() == 2
    assert j_config.getTolerableCheckpointFailureNumber() == 4
    assert str(j_config.getCheckpointingConsistencyMode()) == "EXACTLY_ONCE"
    assert j_config.isUnalignedCheckpointsEnabled()
    assert str(j_config.getExternalizedCheckpointRetention()) == "RETAIN_ON_CANCELLATION"


def test_job_configuration_reaches_the_java_side(env):
    j_conf = env._j_stream_execution_environment.getConfiguration()
    get = lambda key: j_conf.toMap().get(key)  # noqa: E731
    assert env.get_parallelism() == 2
    assert get("restart-strategy.type") == "fixed-delay"
    assert get("restart-strategy.fixed-delay.attempts") == "5"
    assert get("python.executable") == sys.executable
    assert env._j_stream_execution_environment.getConfig().isObjectReuseEnabled()
    assert get("execution.checkpointing.dir").endswith("/.local/checkpoints/enrich")
    jars = get("pipeline.jars")
    assert "flink-sql-connector-kafka-5.0.0-2.2.jar" in jars and "pipelines-flink.jar" in jars


def test_object_reuse_is_on_unless_a_job_turns_it_off():
    def reuse(*overrides: str) -> str:
        loaded = load_settings("passthrough", environ={}, overrides=list(overrides))
        return flink_configuration(loaded.settings)["pipeline.object-reuse"]

    assert reuse() == "true"
    assert reuse("job.object_reuse=false") == "false"


def test_checkpointing_off_sets_no_interval():
    settings = load_settings(
        "passthrough", environ={}, overrides=["checkpoint.enabled=false"]
    ).settings
    assert "execution.checkpointing.interval" not in flink_configuration(settings)


def test_at_least_once_mode_reaches_the_java_side():
    settings = load_settings(
        "passthrough",
        environ={},
        overrides=["checkpoint.mode=at-least-once", "sink.delivery=at-least-once"],
    ).settings
    j_config = create_environment(settings).get_checkpoint_config()._j_checkpoint_config
    assert str(j_config.getCheckpointingConsistencyMode()) == "AT_LEAST_ONCE"
