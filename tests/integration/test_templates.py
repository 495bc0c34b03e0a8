"""A job made by `pipelines-dev new` passes its own generated test at once, and takes a lookup
client of the user's own, each in a fresh copy of the project (so nothing here leaks into
the working tree)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest
import yaml

from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import cli, fresh_copy
from tests.support import topic_args

pytestmark = pytest.mark.integration


TEMPLATES = {"enrich": 3, "windowed": 3, "passthrough": 3, "beam-enrich": 1}  # tests each writes


def test_each_new_job_passes_its_own_tests(tmp_path, kafka):
    """A job from each template, made in one fresh copy, and their tests run there as a team
    would run them (one pytest: the copy's broker and mini-cluster are shared, as in a
    copy's own suite); each job's tests are counted on their own."""
    copy, env = fresh_copy(tmp_path, kafka)
    tests: dict[str, list[str]] = {}
    for template in TEMPLATES:
        name = f"my_{template.replace('-', '_')}"
        made = cli(copy, env, "new", name, "--from", template)
        assert made.returncode == 0, made.stderr
        beam = template.startswith("beam-")
        assert f"created pipelines/{'beam' if beam else 'jobs'}/{name}.py" in made.stdout
        tests[template] = [f"tests/integration/test_{'beam_' if beam else ''}job_{name}.py"]
        if not beam:  # and its fast test, pipelines.testing (no Kafka)
            tests[template].append(f"tests/unit/test_job_{name}_logic.py")
            assert f"created {tests[template][1]}" in made.stdout
    every = [path for paths in tests.values() for path in paths]
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--durations=0", *every],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(tested.stdout[-3000:])
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-2000:]
    for template, expected in TEMPLATES.items():
        passed = [
            line
            for line in tested.stdout.splitlines()
            if " PASSED" in line and line.split("::")[0] in tests[template]
        ]
        assert len(passed) == expected, (template, passed)
    assert f"{sum(TEMPLATES.values())} passed" in tested.stdout


# A client the way a user writes one: a module of their own, answering from a table. No
# HTTP service runs in this test: preflight finds nothing to check, and every lookup is
# this client's.
TABLE_CLIENT = '''
"""Customer tiers from a table: a lookup client of this project's contract."""

from pipelines.lookups import PermanentLookupError

TIERS = {"acme": {"tier": "gold"}, "globex": {"tier": "silver"}}


class TierTable:
    async def lookup(self, record: dict) -> dict:
        try:
            return TIERS[record["customer"]]
        except KeyError:
            raise PermanentLookupError(f"no tier for {record['customer']!r}") from None

    async def close(self) -> None:
        pass
'''


def test_new_job_runs_with_a_client_of_its_own(tmp_path, kafka, names):
    copy, env = fresh_copy(tmp_path, kafka)
    made = cli(copy, env, "new", "orders", "--from", "enrich")
    assert made.returncode == 0, made.stderr
    module_path = copy / "pipelines" / "jobs" / "orders.py"
    module = module_path.read_text()
    # The generated module shows where the client plugs in: one function, one line to change.
    plug = "    return DemoHttpClient.from_settings(settings)\n"
    assert "def lookup_client(settings: Settings) -> EnrichmentClient:" in module
    assert module.count(plug) == 1
    (copy / "pipelines" / "lookups" / "tiers.py").write_text(TABLE_CLIENT)
    module_path.write_text(
        module.replace(
            plug, "    from pipelines.lookups.tiers import TierTable\n\n    return TierTable()\n"
        )
    )
    # ...and its records are keyed by customer, not by the demo's company.
    conf_path = copy / "conf" / "base" / "orders.yaml"
    conf = yaml.safe_load(conf_path.read_text())
    conf["parse"]["required_fields"] = {"id": "any", "customer": "string"}
    conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))

    customers = ["acme", "globex", "initech"]
    records = [{"id": i, "customer": customers[i % 3]} for i in range(90)]
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), [json.dumps(r) for r in records] + ["not json"])
    ran = cli(
        copy,
        env,
        "run",
        "orders",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "enrichment.url=http://127.0.0.1:9/nothing-listens-here",
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]

    out = {r["id"]: r for r in map(json.loads, read_all(kafka, names("out")))}
    tiers = {"acme": {"tier": "gold"}, "globex": {"tier": "silver"}}
    assert {i: (r["customer"], r["enrichment"]) for i, r in out.items()} == {
        r["id"]: (r["customer"], tiers[r["customer"]]) for r in records if r["customer"] in tiers
    }
    dead = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    refused = [d for d in dead if d["stage"] == "enrich"]
    assert sorted(json.loads(base64.b64decode(d["value_b64"]))["id"] for d in refused) == [
        r["id"] for r in records if r["customer"] == "initech"
    ]
    assert {d["error"] for d in refused} == {"enrichment refused the record: no tier for 'initech'"}
    assert [d["error"] for d in dead if d["stage"] == "parse"] == [
        "not valid JSON: Expecting value at line 1 column 1"
    ]
    assert {d["job"] for d in dead} == {"orders"}
