"""A savepoint of the enrich job, committed under tests/fixtures/, that later code must restore.

A savepoint maps its state to operators by uid; the unit test test_job_graph pins the uids,
and this fixture proves the pin holds where it matters: a savepoint taken by an earlier
version of the code (the one named in the fixture's `made.json`) restores into today's job
without --allowNonRestoredState (test_savepoint_fixture.py). It was taken once, by

    .venv/bin/python -m tests.integration.savepoint_fixture <bootstrap> <enrichment url>

against a local broker and the demo service: RECORDS records read and enriched, then the
job stopped with a savepoint. Regenerate it only on purpose (a change that breaks state
compatibility says so in its release notes); never to make the restore test pass."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "savepoint-enrich"
PARTITIONS = 3
RECORDS = 300  # read before the savepoint: 100 per partition, produced round-robin


def fixture_names(key: str) -> str:
    """The `names` the fixture's topics, group and prefix were made with (the savepoint's
    source state names its topic, so a restore must read the same one)."""
    return f"savepoint-fixture-{key}"


NAMES = {key: fixture_names(key) for key in ("in", "out", "dlq", "group", "tx")}


def make(bootstrap: str, enrichment_url: str) -> Path:
    from pipelines_dev.demo import demo_values
    from pipelines_dev.topics import create_topics, delete_topics, produce, read_all
    from tests.integration.helpers import RunningJob
    from tests.support import topic_args

    delete_topics(bootstrap, [NAMES["in"], NAMES["out"], NAMES["dlq"]])
    create_topics(bootstrap, {NAMES["in"]: PARTITIONS, NAMES["out"]: PARTITIONS, NAMES["dlq"]: 1})
    produce(bootstrap, NAMES["in"], demo_values(RECORDS))
    scratch = Path("/tmp/savepoint-fixture")
    shutil.rmtree(scratch, ignore_errors=True)
    job = RunningJob(
        "enrich",
        *topic_args(bootstrap, fixture_names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_url}",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        f"checkpoint.savepoints=file://{scratch}",
        "--savepoint-on-stop",
    )
    try:
        deadline = time.monotonic() + 180
        while len(read_all(bootstrap, NAMES["out"])) < RECORDS:
            assert time.monotonic() < deadline, job.output
            time.sleep(1)
    finally:
        assert job.interrupt() == 0, job.output
    written = job.wait_for(r"savepoint written to (\S+)").group(1)
    source = Path(written.split(":", 1)[-1])
    shutil.rmtree(FIXTURE, ignore_errors=True)
    shutil.copytree(source, FIXTURE / "savepoint")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    made = {"commit": commit, "job": "enrich", "records_read": RECORDS, "names": NAMES}
    (FIXTURE / "made.json").write_text(json.dumps(made, indent=2) + "\n")
    return FIXTURE


if __name__ == "__main__":
    print(make(sys.argv[1], sys.argv[2]))
