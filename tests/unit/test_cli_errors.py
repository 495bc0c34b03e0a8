"""Every mistake a user can make at the command line is one line on stderr and exit 2:
no traceback, nothing destroyed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import CLI, JOB_CLI, ROOT, run_cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["run", "a.b"],
            "error: no job named 'a.b': a job is a module pipelines/jobs/<name>.py, "
            "its name lowercase letters, digits and _ (jobs here: enrich, passthrough, "
            "windowed)",
        ),
        (
            ["run", "nosuchjob"],
            "error: no job named 'nosuchjob' (no module "
            "pipelines/jobs/nosuchjob.py; jobs here: enrich, passthrough, windowed)",
        ),
        (
            ["enrichment", "up", "--latency", "fast"],
            "error: --latency: 'fast' is not a duration; use e.g. 500ms, 10s, 5min, 1h or milliseconds",
        ),
        (
            ["new", "orders", "--root", "/nonexistent"],
            "error: --root /nonexistent: not a copy of this project (no pipelines/jobs/ and conf/base/ "
            "there)",
        ),
        (
            ["offsets", "--group", "g", "--bootstrap", "127.0.0.1:1"],
            "error: no Kafka broker answered at 127.0.0.1:1 within 5s (start one with `make kafka-up`)",
        ),
        (
            ["demo", "enrich", "--set", "kafka.bootstrap_servers=127.0.0.1:1", "--records", "3"],
            "error: no Kafka broker answered at 127.0.0.1:1 within 5s (start one with `make kafka-up`)",
        ),
        (
            [
                "config",
                "show",
                "enrich",
                "--set",
                "kafka.security.protocol=SASL_SSL",
                "--set",
                "kafka.security.sasl_mechanism=PLAIN",
                "--set",
                "kafka.security.username=u",
                "--set",
                "kafka.security.password=12345678",
                "--set",
                "kafka.security.protocol=NOPE",
            ],
            "error: --set: kafka.security.protocol: 'NOPE' is not allowed; allowed: PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            ["offsets", "--group", "g", "--watch", "-1"],
            "error: pipelines offsets: argument --watch: '-1': give a number of seconds greater "
            "than 0 (see `pipelines offsets --help`)",
        ),
        (
            ["offsets", "--group", "g", "--watch", "nan"],
            "error: pipelines offsets: argument --watch: 'nan': give a number of seconds greater "
            "than 0 (see `pipelines offsets --help`)",
        ),
        (
            ["new", "names", "--from", "beam-enrich"],
            "error: job name 'names' is not allowed: it would replace pipelines.beam.names, which "
            "the project uses; choose another, e.g. names_job",
        ),
    ],
)
def test_one_line_and_exit_2(args, line):
    proc = run_cli(*args, check=False, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == line
    assert "12345678" not in proc.stdout + proc.stderr


def test_the_job_command_points_a_developer_command_at_pipelines_dev():
    """`pipelines` (the runtime's command, all a machine that runs jobs has) answers a
    developer command in one line naming the command that has it."""
    proc = subprocess.run(
        [*JOB_CLI, "kafka", "up"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "error: `pipelines kafka` is a developer command: run `pipelines-dev kafka ...` in a "
        "checkout of this project (`pipelines` has the job commands only: beam, config, "
        "doctor, jars, jobs, offsets, package, run)"
    )
    helps = {
        name: subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60).stdout
        for name, cmd in (("pipelines", JOB_CLI), ("pipelines-dev", CLI))
    }
    assert "{run,doctor,package,config,jars,beam,jobs,offsets}" in helps["pipelines"]
    assert "usage: pipelines-dev" in helps["pipelines-dev"]
    for command in ("kafka", "topology", "new", "submit"):
        assert f"    {command} " in helps["pipelines-dev"], command
        assert f"    {command} " not in helps["pipelines"], command


def test_package_refuses_a_directory_that_is_not_an_earlier_package(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my own work")
    proc = run_cli("package", "passthrough", "--out", str(out), check=False, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: --out {out}: not empty and not an earlier package "
        f"(no .pipelines-package); choose an empty or new directory"
    )
    assert (out / "notes.txt").read_text() == "my own work"
    # An earlier package is replaced, twice over.
    fresh = tmp_path / "pkg"
    for _ in range(2):
        run_cli("package", "passthrough", "--out", str(fresh), timeout=120)
    assert (fresh / ".pipelines-package").is_file() and (fresh / "SUBMIT.sh").is_file()


def test_a_config_file_that_is_not_utf8_names_the_file_line_and_byte(tmp_path):
    conf = tmp_path / "conf"
    (conf / "base").mkdir(parents=True)
    source = (ROOT / "conf" / "base" / "passthrough.yaml").read_bytes()
    (conf / "base" / "passthrough.yaml").write_bytes(
        source.replace(b"group_id: passthrough", b"group_id: pass\xffthrough")
    )
    line = source[: source.index(b"group_id")].count(b"\n") + 1
    offset = source.index(b"group_id: passthrough") + len(b"group_id: pass")
    proc = run_cli("config", "show", "passthrough", "--conf-dir", str(conf), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: {conf / 'base' / 'passthrough.yaml'}: line {line}: not UTF-8 text (byte 0xff "
        f"at offset {offset}); save the file as UTF-8\n"
    )


def test_package_keeps_a_package_that_holds_state(tmp_path):
    """A package made before state moved out of packages held `.local/checkpoints`:
    re-packaging over it is refused, and the state stays."""
    out = tmp_path / "pkg"
    run_cli("package", "passthrough", "--out", str(out), timeout=120)
    kept = out / ".local" / "checkpoints" / "passthrough" / "j" / "chk-3" / "_metadata"
    kept.parent.mkdir(parents=True)
    kept.write_text("state")
    proc = run_cli("package", "passthrough", "--out", str(out), check=False, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        f"error: --out {out}: the earlier package holds state in {out / '.local'} (checkpoints "
        f"or savepoints of a submitted job); move it out"
    ), proc.stderr
    assert kept.read_text() == "state"


def test_running_a_module_of_jobs_that_declares_no_job_is_one_line():
    """A helper module in pipelines/jobs (here put in place by the child process itself,
    so that the tree stays as it is) is not a job: `pipelines run helper` says so."""
    program = (
        "import sys, types\n"
        "helper = types.ModuleType('pipelines.jobs.helper')\n"
        "exec('def build(env, settings): pass', helper.__dict__)\n"
        "sys.modules[helper.__name__] = helper\n"
        "from pipelines.cli import main\n"
        "sys.argv = ['pipelines', 'run', 'helper']\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "error: pipelines/jobs/helper.py is not a job: it declares no `job` (a job module "
        "ends with `job = Job(build, ...)`; jobs here: enrich, passthrough, windowed)"
    )
