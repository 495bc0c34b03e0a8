"""The Kubernetes manifest names only modules, jars and config paths the package has, and
its job config is a valid config for the job."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipelines.flink.distribution import flink_home
from pipelines.running import registry
from pipelines.settings import load_settings
from pipelines.shipping.packaging import package_job
from pipelines_dev.containers import DEPLOY_IMAGE, DEPLOY_ROOT, deploy_command

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ROOT = "/opt/pipelines"


@pytest.fixture(scope="module")
def manifest():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "enrich.yaml").read_text()))
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    loaded = load_settings("enrich", sections=registry.load("enrich").sections, environ={})
    out = tmp_path_factory.mktemp("pkg") / "enrich"
    return package_job(loaded, out, python="/opt/venv/bin/python", flink="flink")


def in_package(package, image_path: str) -> Path:
    assert image_path.startswith(IMAGE_ROOT + "/") or image_path == IMAGE_ROOT, image_path
    return package.root / image_path[len(IMAGE_ROOT) :].lstrip("/")


def test_python_entry_module_and_py_files_exist(manifest, package):
    job = manifest["FlinkDeployment"]["spec"]["job"]
    assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    args = job["args"]
    module = args[args.index("--pyModule") + 1]
    py_files = in_package(package, args[args.index("--pyFiles") + 1])
    assert (py_files / Path(*module.split("."))).with_suffix(".py").is_file()


def test_driver_jar_matches_the_flink_python_version(manifest):
    jar = manifest["FlinkDeployment"]["spec"]["job"]["jarURI"].removeprefix(
        "local:///opt/flink/opt/"
    )
    assert (flink_home() / "opt" / jar).is_file(), f"{jar} is not the wheel's flink-python jar"


def test_every_pipeline_jar_is_in_the_package(manifest, package):
    jars = manifest["FlinkDeployment"]["spec"]["flinkConfiguration"]["pipeline.jars"].split(";")
    assert sorted(in_package(package, j.removeprefix("file://")).name for j in jars) == sorted(
        p.name for p in package.jars
    )
    for jar in jars:
        assert in_package(package, jar.removeprefix("file://")).is_file()


def test_mounted_config_replaces_a_packaged_file_and_is_valid(
    manifest, package, tmp_path, monkeypatch
):
    monkeypatch.setenv("KAFKA_PASSWORD", "from-the-secret")
    mount = manifest["FlinkDeployment"]["spec"]["podTemplate"]["spec"]["containers"][0][
        "volumeMounts"
    ][0]
    assert in_package(package, mount["mountPath"]).is_file()
    conf = tmp_path / "conf" / "base"
    conf.mkdir(parents=True)
    (conf / "enrich.yaml").write_text(manifest["ConfigMap"]["data"][mount["subPath"]])
    settings = load_settings(
        "enrich", sections=registry.load("enrich").sections, conf_dir=tmp_path / "conf", environ={}
    ).settings
    assert settings.kafka.security.password.get_secret_value() == "from-the-secret"
    flink_conf = manifest["FlinkDeployment"]["spec"]["flinkConfiguration"]
    assert (
        settings.checkpoint.storage.replace("{job}", "enrich")
        == flink_conf["execution.checkpointing.dir"]
    )
    assert settings.job.parallelism == manifest["FlinkDeployment"]["spec"]["job"]["parallelism"]


def test_dockerfile_copies_the_package_where_the_manifest_expects_it():
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(rf"^COPY dist/\$\{{JOB\}} {DEPLOY_ROOT}$", dockerfile, re.M)
    assert re.search(rf"^ENV PYTHONPATH={DEPLOY_ROOT}$", dockerfile, re.M)
    # The default base is the official Flink image (what the operator starts); the container
    # test passes a base built on the machine instead.
    assert re.search(r"^ARG BASE=flink:2\.2\.1-java17$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE\}$", dockerfile, re.M)


def test_manifest_runs_the_image_and_command_the_container_test_ran(manifest):
    """tests/integration/test_containers.py builds DEPLOY_IMAGE from deploy/Dockerfile and
    runs deploy_command("enrich") in it: the manifest names that image, and its PythonDriver
    arguments start the same python on the same module from the same source root."""
    spec = manifest["FlinkDeployment"]["spec"]
    assert spec["image"] == DEPLOY_IMAGE
    args = spec["job"]["args"]
    python, dash_m, module = deploy_command("enrich")
    assert dash_m == "-m"
    assert args[args.index("-pyclientexec") + 1] == python
    assert args[args.index("-pyexec") + 1] == python
    assert args[args.index("--pyModule") + 1] == module
    assert args[args.index("--pyFiles") + 1] == DEPLOY_ROOT
    assert spec["flinkConfiguration"]["python.executable"] == python


def test_s3_checkpoints_have_the_s3_filesystem_plugin_enabled(manifest):
    """The manifest checkpoints to s3://, so it needs Flink's S3 filesystem plugin: enabled
    with ENABLE_BUILT_IN_PLUGINS, which the official image's entry point (the Dockerfile's
    default base) copies from /opt/flink/opt into plugins/. The jar is Flink's own S3 plugin
    at the wheel's Flink version."""
    spec = manifest["FlinkDeployment"]["spec"]
    conf = spec["flinkConfiguration"]
    assert conf["execution.checkpointing.dir"].startswith("s3://")
    assert conf["execution.checkpointing.savepoint-dir"].startswith("s3://")
    env = {e["name"]: e.get("value") for e in spec["podTemplate"]["spec"]["containers"][0]["env"]}
    (python_jar,) = (flink_home() / "opt").glob("flink-python-*.jar")
    version = python_jar.name.removeprefix("flink-python-").removesuffix(".jar")
    assert f"flink-s3-fs-hadoop-{version}.jar" in env["ENABLE_BUILT_IN_PLUGINS"].split(";")


def test_every_pod_serves_prometheus_metrics_where_the_pod_monitor_scrapes(manifest):
    """The reporter a local run configures (pipelines.flink.environment), on the port the
    container names, the annotations give and the PodMonitor scrapes, for this app."""
    from pipelines.flink.environment import PROMETHEUS_REPORTER

    spec = manifest["FlinkDeployment"]["spec"]
    conf = spec["flinkConfiguration"]
    assert conf["metrics.reporter.prom.factory.class"] == PROMETHEUS_REPORTER
    port = int(conf["metrics.reporter.prom.port"])
    [container] = spec["podTemplate"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
    annotations = spec["podTemplate"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    monitor = manifest["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"] == {
        "app": manifest["FlinkDeployment"]["metadata"]["name"]
    }
    assert [e["port"] for e in monitor["podMetricsEndpoints"]] == ["metrics"]


def test_the_container_start_script_keeps_every_environment_out_of_the_logs():
    """The topology's daemons and clients quiet the same loggers as the local runs and the
    standalone cluster (a TaskManager's environment holds a job section's secrets)."""
    from pipelines.flink.gateway import QUIET_ENVIRONMENT_LOGS

    script = (ROOT / "deploy" / "flink" / "flink-start.sh").read_text()
    lines = [line for line in QUIET_ENVIRONMENT_LOGS.strip().splitlines() if line[0] != "#"]
    assert len(lines) == 4 and all(f"\n{line}\n" in script for line in lines)
