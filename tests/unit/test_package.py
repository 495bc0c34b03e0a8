"""`pipelines package` for a cluster elsewhere: secrets stay the references they were written
as, SUBMIT.sh takes the JobManager, `flink` and python from arguments or environment and
holds no path of the building machine, and both list what the package needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.host.paths import PROJECT_ROOT
from pipelines.lookups.http_demo import DemoService
from pipelines.running import registry
from pipelines.settings import load_settings
from pipelines.shipping.packaging import package_job

pytestmark = pytest.mark.unit

BASE = yaml.safe_load((PROJECT_ROOT / "conf" / "base" / "enrich.yaml").read_text())


@pytest.fixture
def secured(tmp_path, monkeypatch):
    """The enrich job's config with its SASL password in a file and its truststore
    password in an environment variable, packaged."""
    password_file = tmp_path / "secrets" / "kafka-password"
    password_file.parent.mkdir()
    password_file.write_text("pa;ss\"word'\n")
    monkeypatch.setenv("TRUST_PW", "trust-secret-value")
    conf = dict(BASE)
    conf["kafka"] = {
        "bootstrap_servers": "kafka.example:9093",
        "security": {
            "protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "username": "enrich",
            "password": f"${{file:{password_file}}}",
            "ssl_truststore_location": "/etc/kafka/truststore.p12",
            "ssl_truststore_password": "${env:TRUST_PW}",
        },
    }
    (tmp_path / "conf" / "base").mkdir(parents=True)
    (tmp_path / "conf" / "base" / "enrich.yaml").write_text(yaml.safe_dump(conf))
    loaded = load_settings(
        "enrich", sections=registry.load("enrich").sections, conf_dir=tmp_path / "conf", environ={}
    )
    package = package_job(loaded, tmp_path / "pkg", python=None, flink="flink")
    return package, password_file


def test_secrets_stay_the_references_they_were_written_as(secured):
    package, password_file = secured
    config = yaml.safe_load((package.root / "conf" / "base" / "enrich.yaml").read_text())
    assert config["kafka"]["security"]["password"] == f"${{file:{password_file}}}"
    assert config["kafka"]["security"]["ssl_truststore_password"] == "${env:TRUST_PW}"
    for path in package.root.rglob("*"):
        if path.is_file() and path.suffix in ("", ".sh", ".md", ".yaml", ".txt"):
            text = path.read_text(errors="replace")
            assert "trust-secret-value" not in text and "pa;ss" not in text, path


def test_requirements_are_listed_in_submit_sh_and_the_readme(secured):
    package, password_file = secured
    script = (package.root / "SUBMIT.sh").read_text()
    readme = (package.root / "README.md").read_text()
    env_line = (
        "environment variable TRUST_PW: kafka.security.ssl_truststore_password "
        "(set where SUBMIT.sh runs)"
    )
    file_line = f"file {password_file}: kafka.security.password (read where SUBMIT.sh runs)"
    assert f"#   {env_line}\n" in script and f"#   {file_line}\n" in script
    requirements = readme.split("## REQUIREMENTS\n", 1)[1]
    assert f"- {env_line}\n" in requirements and f"- {file_line}\n" in requirements


def test_submit_sh_holds_no_path_of_the_building_machine(secured):
    package, _ = secured
    script = (package.root / "SUBMIT.sh").read_text()
    for path in (str(PROJECT_ROOT), sys.executable, str(package.root)):
        assert path not in script


def _submit(package, *args, env=None):
    return subprocess.run(
        [str(package.root / "SUBMIT.sh"), *args],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], **(env or {})},
        cwd="/",
    )


def test_submit_sh_refuses_to_start_without_what_it_needs(secured, tmp_path):
    package, password_file = secured
    password_file.unlink()
    proc = _submit(package)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"SUBMIT.sh: no readable file {password_file} (kafka.security.password)",
        "SUBMIT.sh: set TRUST_PW (kafka.security.ssl_truststore_password)",
    ]


def test_submit_sh_takes_jobmanager_flink_and_python_from_environment_or_arguments(
    secured, tmp_path
):
    """A stand-in `flink` that prints its arguments: what SUBMIT.sh hands the real one (the
    integration suite submits with the real one to a second cluster)."""
    package, _ = secured
    home = tmp_path / "flink-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "flink").write_text('#!/bin/sh\necho "$PWD"; echo "$@"\n')
    (home / "bin" / "flink").chmod(0o755)
    env = {"TRUST_PW": "x", "FLINK_HOME": str(home), "JOBMANAGER": "jm.example:8081"}
    proc = _submit(package, "--set", "job.parallelism=2", env=env)
    assert proc.returncode == 0, proc.stderr
    cwd, args = proc.stdout.splitlines()
    jar = package.jars[0].name
    assert cwd == str(package.root)
    assert args == (
        f"run -m jm.example:8081 --jarfile jars/lib/{jar} -pyexec python3 -pyclientexec "
        f"python3 --pyModule pipelines.jobs.enrich --pyFiles {package.root} "
        "--set job.parallelism=2"
    )
    proc = _submit(
        package, "--jobmanager", "other:9081", "--python", "/opt/venv/bin/python", env=env
    )
    assert proc.stdout.splitlines()[1].startswith(
        f"run -m other:9081 --jarfile jars/lib/{jar} -pyexec /opt/venv/bin/python "
        "-pyclientexec /opt/venv/bin/python"
    )
    # A client whose python differs from the TaskManagers' (they run in containers).
    proc = _submit(
        package, "--python", "/opt/venv/bin/python", env={**env, "CLIENT_PYTHON": "/usr/bin/py"}
    )
    assert " -pyexec /opt/venv/bin/python -pyclientexec /usr/bin/py " in proc.stdout
    proc = _submit(package, "--client-python", "/c/py", env=env)
    assert " -pyexec python3 -pyclientexec /c/py " in proc.stdout


HOSTILE_JOBMANAGER = 'jm:8081}"; touch {canary}; : "'
HOSTILE_PYTHON = "/usr/bin/python3; touch {canary}"


@pytest.mark.parametrize(
    "argument, value, line",
    [
        (
            "--jobmanager",
            HOSTILE_JOBMANAGER,
            "error: --jobmanager 'jm:8081}\"; touch {canary}; : \"': expected HOST:PORT (letters, "
            "digits, dots and dashes, then a port), e.g. flink-jm:8081",
        ),
        ("--jobmanager", "jm:8081\n#", None),
        ("--jobmanager", "jm:99999", None),
        (
            "--python",
            HOSTILE_PYTHON,
            "error: --python '/usr/bin/python3; touch {canary}': expected a command or a path "
            "(letters, digits and _ . / + @ % -), e.g. /usr/bin/python3.11",
        ),
        ("--python", "python3\nrm -rf /", None),
        ("--python", "$(id)", None),
    ],
)
def test_package_takes_no_code_from_its_arguments(tmp_path, argument, value, line):
    from tests.support import run_cli

    canary = tmp_path / "injected"
    out = tmp_path / "pkg"
    proc = run_cli(
        "package",
        "passthrough",
        "--out",
        str(out),
        argument,
        value.replace("{canary}", str(canary)),
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    if line is not None:
        assert proc.stderr == line.replace("{canary}", str(canary)) + "\n"
    else:
        assert proc.stderr.startswith(f"error: {argument} "), proc.stderr
    assert not out.exists(), "a refused package wrote files"
    assert not canary.exists()


def test_a_secret_reference_that_would_be_code_in_submit_sh_is_refused(tmp_path):
    from tests.support import run_cli

    secret = tmp_path / "pass$(touch injected)word"
    secret.write_text("s3cret")
    proc = run_cli(
        "package",
        "passthrough",
        "--out",
        str(tmp_path / "pkg"),
        "--set",
        "kafka.security.protocol=SASL_SSL",
        "--set",
        "kafka.security.sasl_mechanism=PLAIN",
        "--set",
        "kafka.security.username=u",
        "--set",
        f"kafka.security.password=${{file:{secret}}}",
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: kafka.security.password: the secret reference file:{str(secret)!r} cannot be "
        f"written into SUBMIT.sh (quotes, $, backslashes or control characters); rename it\n"
    )
    assert "s3cret" not in proc.stdout + proc.stderr
    assert not (tmp_path / "pkg").exists()


def test_submit_sh_keeps_a_valid_default_as_one_quoted_word(tmp_path):
    loaded = load_settings("passthrough", environ={})
    with pytest.raises(Exception, match="--python '/opt/py 3/bin/python'"):
        package_job(loaded, tmp_path / "pkg", python="/opt/py 3/bin/python", flink="flink")
    package = package_job(
        loaded,
        tmp_path / "pkg",
        python="/opt/py3.11/bin/python",
        flink="flink",
        jobmanager="flink-jm.prod:8081",
    )
    script = (package.root / "SUBMIT.sh").read_text()
    assert "default_jobmanager=flink-jm.prod:8081\n" in script
    assert "default_python=/opt/py3.11/bin/python\n" in script
    assert subprocess.run(["bash", "-n", str(package.root / "SUBMIT.sh")]).returncode == 0


def test_a_package_made_under_umask_077_is_readable_by_the_cluster_user(tmp_path):
    """The CLI writes under umask 077; a package (code, config with secret references,
    jars) is for other users: a TaskManager that runs as `flink` must read it."""
    import stat

    loaded = load_settings("passthrough", environ={})
    previous = os.umask(0o077)
    try:
        package = package_job(loaded, tmp_path / "pkg", python=None, flink="flink")
    finally:
        os.umask(previous)
    modes = {
        path.relative_to(package.root): stat.S_IMODE(path.stat().st_mode)
        for path in [package.root, *package.root.rglob("*")]
    }
    assert modes[Path("SUBMIT.sh")] == 0o755
    assert all(m in (0o644, 0o755) for m in modes.values()), {
        p: oct(m) for p, m in modes.items() if m not in (0o644, 0o755)
    }


def test_a_value_from_a_reference_stays_a_reference_whatever_its_key(tmp_path, monkeypatch):
    """`${env:}`/`${file:}` make a value secret wherever it sits; a URL's password too."""
    monkeypatch.setenv("GROUP_FROM_ENV", "canary-group")
    conf = dict(BASE)
    conf["source"] = {**BASE["source"], "group_id": "${env:GROUP_FROM_ENV}"}
    conf["demo_service"] = {"url": "http://u:canary-url-pass@svc:8765"}
    (tmp_path / "conf" / "base").mkdir(parents=True)
    (tmp_path / "conf" / "base" / "enrich.yaml").write_text(yaml.safe_dump(conf))
    loaded = load_settings(
        "enrich", conf_dir=tmp_path / "conf", environ={}, sections=(DemoService,)
    )
    package = package_job(loaded, tmp_path / "pkg", python=None, flink="flink")
    config = yaml.safe_load((package.root / "conf" / "base" / "enrich.yaml").read_text())
    assert config["source"]["group_id"] == "${env:GROUP_FROM_ENV}"
    assert config["demo_service"]["url"] == "${env:PIPELINES__DEMO_SERVICE__URL}"
    text = "".join(p.read_text(errors="replace") for p in package.root.rglob("*") if p.is_file())
    assert "canary-group" not in text and "canary-url-pass" not in text
