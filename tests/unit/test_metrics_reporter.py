"""metrics.prometheus_port: validated where it is read, turned into the reporter's Flink
keys, and the reporter jar put where a mini-cluster finds it (its class path)."""

from __future__ import annotations

import textwrap

import pytest

from pipelines.flink.environment import PROMETHEUS_REPORTER, flink_configuration
from pipelines.flink.gateway import reporter_jars, with_reporters
from pipelines.settings import ConfigError, load_settings

pytestmark = pytest.mark.unit

BASE = """
job: {name: demo}
source: {topics: [in], group_id: g}
sink: {topic: out, transactional_id_prefix: demo}
"""


def _load(tmp_path, *overrides: str):
    (tmp_path / "base").mkdir(exist_ok=True)
    (tmp_path / "base" / "demo.yaml").write_text(textwrap.dedent(BASE))
    return load_settings("demo", conf_dir=tmp_path, environ={}, overrides=overrides).settings


@pytest.mark.parametrize(
    "given, port", [(None, "9249-9259"), ("9300", "9300"), ("20000-20010", "20000-20010")]
)
def test_the_reporter_gets_the_port_or_range(tmp_path, given, port):
    sets = [f"metrics.prometheus_port={given}"] if given else []
    conf = flink_configuration(_load(tmp_path, *sets))
    assert conf["metrics.reporter.prom.factory.class"] == PROMETHEUS_REPORTER
    assert conf["metrics.reporter.prom.port"] == port


def test_null_switches_the_reporter_off(tmp_path):
    conf = flink_configuration(_load(tmp_path, "metrics.prometheus_port=null"))
    assert not any(key.startswith("metrics.reporter.") for key in conf)


@pytest.mark.parametrize("bad", ["80", "9300-9200", "70000", "9249-", "a-b", "9249,9250"])
def test_a_port_outside_the_rules_is_refused_with_what_is_allowed(tmp_path, bad):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"metrics.prometheus_port={bad}")
    assert str(err.value) == (
        f"--set: metrics.prometheus_port: '{bad}' is not a port or a range A-B of ports "
        "between 1024 and 65535"
    )


def test_the_gateway_class_path_gains_the_wheels_reporter_jar():
    [jar] = reporter_jars()
    assert jar.parent.name == "metrics-prometheus"
    command = ["java", "-Xmx1g", "-cp", "a.jar:b.jar", "Main", "arg"]
    assert with_reporters(command) == ["java", "-Xmx1g", "-cp", f"a.jar:b.jar:{jar}", "Main", "arg"]
    assert with_reporters(["flink", "run", "-c", "Main"]) == ["flink", "run", "-c", "Main"]
