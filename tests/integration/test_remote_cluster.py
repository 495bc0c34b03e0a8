"""A cluster that is not the local one: a second standalone cluster on other ports, started
from another working directory, submitted to by address only (`pipelines-dev submit
--jobmanager`, and a package's SUBMIT.sh with JOBMANAGER and FLINK_HOME)."""

from __future__ import annotations

import json
import re
import sys
import urllib.request

import pytest

from pipelines.flink.distribution import flink_home
from pipelines_dev.demo import demo_values
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import Started, assert_dead_letters_are, run_cli, topic_args

pytestmark = pytest.mark.cluster


def _jobs_at(jobmanager: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"http://{jobmanager}/jobs/overview", timeout=10) as resp:
        return {j["jid"]: j for j in json.load(resp)["jobs"]}


def _enrich_args(kafka, names, service):
    return [
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={service.url}",
        "--set",
        "source.bounded=true",
    ]


def _assert_enriched_exactly(kafka, names, values, partitions=2):
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    dlq = read_all(kafka, names("dlq"))
    print(f"input {len(values)}, output {len(out)}, dead letters {len(dlq)}")
    assert sorted(r["id"] for r in out) == sorted(
        json.loads(v)["id"] for v in values if v.startswith(b'{"id"')
    )
    assert_dead_letters_are(dlq, names("in"), values, partitions)


def test_submit_by_jobmanager_address(kafka, names, enrichment_service, second_cluster):
    total, bad_every = 300, 30
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    values = demo_values(total, bad_every=bad_every)
    produce(kafka, names("in"), values)
    proc = run_cli(
        "submit",
        *_enrich_args(kafka, names, enrichment_service),
        "--jobmanager",
        second_cluster,
    )
    job_id = re.search(r"Job has been submitted with JobID (\w+)", proc.stdout).group(1)
    job = _jobs_at(second_cluster)[job_id]
    assert (job["name"], job["state"]) == ("enrich", "FINISHED")
    _assert_enriched_exactly(kafka, names, values)


def test_package_submitted_by_submit_sh_with_jobmanager_and_flink_home_from_environment(
    kafka, names, enrichment_service, second_cluster, tmp_path
):
    total, bad_every = 300, 25
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    values = demo_values(total, bad_every=bad_every)
    produce(kafka, names("in"), values)
    package = tmp_path / "enrich-package"
    run_cli("package", *_enrich_args(kafka, names, enrichment_service), "--out", str(package))
    before = set(_jobs_at(second_cluster))
    submit = Started(
        [str(package / "SUBMIT.sh"), "--skip-preflight"],
        # Only the package on the path; the cluster's python and flink from the environment.
        env={
            "PYTHONPATH": "",
            "JOBMANAGER": second_cluster,
            "FLINK_HOME": str(flink_home()),
            "PYTHON": sys.executable,
        },
        cwd=tmp_path,
    )
    assert submit.wait(300) == 0, submit.output
    (job_id,) = set(_jobs_at(second_cluster)) - before
    assert f"Job has been submitted with JobID {job_id}" in submit.output
    _assert_enriched_exactly(kafka, names, values)


def test_an_address_nobody_answers_at_is_one_line(kafka, names, enrichment_service):
    port = free_ports()
    proc = run_cli(
        "submit",
        *_enrich_args(kafka, names, enrichment_service),
        "--jobmanager",
        f"127.0.0.1:{port}",
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: no Flink JobManager answers at http://127.0.0.1:{port}: is it running?"
    )
