"""A job a team owns, as a team makes it: `pipelines-dev new orders --from enrich` in a fresh
copy of the project, its client replaced by one of its own that reads two settings of the
job's own section (a table file and a token from `${env:}`), as docs/make-it-yours.md says.

Then: the generated tests survive the swap (the logic test as it is, the smoke test once its
one marked place is changed, after failing with a message that names that place); the job
runs on Kafka (exact read_committed read-back), through pipelines.testing with the real
client, and as a package through SUBMIT.sh on a standalone cluster whose TaskManagers have
the token in their environment, as a deployment gives it (the session's second cluster,
tests/conftest.py, which test_remote_cluster submits to as well). The token is looked for
everywhere it must not be, as the canary test looks for the project's own secrets:
command lines, every command's output, the package and its deploy image (every layer),
the cluster's REST configuration and logs, the copy's local state, and each pickled
function (which carries the reference `${env:PRICING_TOKEN}` instead)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import sys
import urllib.request

import pytest
import yaml

from pipelines.flink.distribution import flink_home
from pipelines_dev.demo import COMPANIES, demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import PRICING_TOKEN, SECOND_CLUSTER_DIR, fresh_copy
from tests.integration.secret_search import (
    CANARY_DIR,
    ImageLayers,
    Sampler,
    decoded,
    hits,
    image_files,
    image_layers,
    layers_present,
    rest_configs,
)
from tests.support import CLI, Started, topic_args

pytestmark = pytest.mark.cluster

TOKEN = PRICING_TOKEN  # unique to this run, in the second cluster's daemons' environment
TOKEN_SHA = hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
PRICES = {"acme": 10, "globex": 20, "initech": 30, "umbrella": 40}  # the rest are refused
STATE = SECOND_CLUSTER_DIR  # tests/conftest.py second_cluster

CLIENT = '''
"""Prices from a table file, behind a token: a lookup client with settings of its job's own."""

import csv
import hashlib

from pipelines.api import PermanentLookupError


class PriceTable:
    def __init__(self, table, token: str):
        with open(table, newline="") as f:
            self.prices = {row["company"]: int(row["price"]) for row in csv.DictReader(f)}
        # What the answer carries to show which token the worker had: its hash, never it.
        self.token_sha256 = hashlib.sha256(token.encode()).hexdigest()[:16]

    async def lookup(self, record: dict) -> dict:
        try:
            price = self.prices[record["company"]]
        except KeyError:
            raise PermanentLookupError(f"no price for {record['company']!r}") from None
        return {"price": price, "token_sha256": self.token_sha256}

    async def close(self) -> None:
        pass
'''

MODEL = """
from pathlib import Path
from typing import ClassVar

from pipelines.api import JobSection


class Pricing(JobSection):
    section: ClassVar[str] = "pricing"
    table: Path
    api_token: str

"""

PLUG = "    return DemoHttpClient.from_settings(settings)\n"
# The demo client's section goes with the demo client; the team's own takes its place.
PLAIN_JOB = "\njob = Job(build, sections=(DemoService,))\n"
OWN_JOB = "\njob = Job(build, sections=(Pricing,))\n"
OWN_PLUG = (
    "    from pipelines.lookups.prices import PriceTable\n\n"
    "    pricing = Pricing.of(settings)\n"
    "    return PriceTable(pricing.table, pricing.api_token)\n"
)

REAL_CLIENT_TEST = f'''
"""The job with its real client, through pipelines.testing."""

import pytest

from pipelines import testing
pytestmark = pytest.mark.unit


def test_prices_come_from_the_table_with_the_workers_token():
    out = testing.run("orders", [{{"id": 1, "company": "acme"}}, {{"id": 2, "company": "hooli"}}])
    assert [(r["id"], r["enrichment"]) for r in out.records] == [
        (1, {{"price": 10, "token_sha256": "{TOKEN_SHA}"}})
    ]
    assert [d["error"] for d in out.dead_letters] == [
        "enrichment refused the record: no price for 'hooli'"
    ]
'''


def _pytest(copy, env, *files: str) -> Started:
    run = Started([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
                  env=env, cwd=copy)  # fmt: skip
    run.wait(600)
    return run


def _expected(values: list[bytes]) -> tuple[dict, list[int]]:
    """id -> enrichment for the priced records, and the ids the client refuses."""
    good = [json.loads(v) for v in values if v.startswith(b'{"id"')]
    priced = {r["id"]: {"price": PRICES[r["company"]], "token_sha256": TOKEN_SHA}
              for r in good if r["company"] in PRICES}  # fmt: skip
    return priced, sorted(r["id"] for r in good if r["company"] not in PRICES)


def _assert_exact(kafka, out_topic: str, dlq_topic: str, values: list[bytes]) -> None:
    priced, refused = _expected(values)
    out = [json.loads(v) for v in read_all(kafka, out_topic)]
    assert len(out) == len(priced), "a record written twice, or one missing"
    assert {r["id"]: r["enrichment"] for r in out} == priced
    dead = [json.loads(v) for v in read_all(kafka, dlq_topic)]
    by_stage = {stage: [d for d in dead if d["stage"] == stage] for stage in ("parse", "enrich")}
    assert sorted(json.loads(base64.b64decode(d["value_b64"]))["id"]
                  for d in by_stage["enrich"]) == refused  # fmt: skip
    assert {d["error"] for d in by_stage["enrich"]} == {
        f"enrichment refused the record: no price for {c!r}" for c in COMPANIES if c not in PRICES
    }
    assert len(by_stage["parse"]) == len(values) - len(priced) - len(refused)
    assert len(dead) == len(by_stage["parse"]) + len(by_stage["enrich"])


def test_a_job_with_settings_of_its_own_end_to_end(kafka, names, second_cluster, tmp_path):
    copy, env = fresh_copy(tmp_path, kafka)
    pickles = tmp_path / "pickles"
    pickles.mkdir()
    env.update(PRICING_TOKEN=TOKEN, CANARY_PICKLES=str(pickles),
               PYTHONPATH=f"{CANARY_DIR}:{copy}")  # fmt: skip
    sampler = Sampler({"token": TOKEN.encode()})
    sampler.start()
    outputs: dict[str, str] = {}
    try:
        made = Started([*CLI, "new", "orders", "--from", "enrich"], env=env, cwd=copy)
        assert made.wait(60) == 0, made.output
        # The generated tests of the job's own client pass against the demo client it has.
        client_tests = "tests/unit/test_job_orders_client.py"
        generated = _pytest(copy, env, client_tests)
        assert generated.proc.returncode == 0 and "4 passed" in generated.output, generated.output
        # The team's client and settings, as docs/make-it-yours.md says.
        (copy / "pipelines" / "lookups" / "prices.py").write_text(CLIENT)
        table = copy / "conf" / "prices.csv"
        table.write_text("company,price\n" + "".join(f"{c},{p}\n" for c, p in PRICES.items()))
        module_path = copy / "pipelines" / "jobs" / "orders.py"
        module = module_path.read_text()
        # The commented example `new` wrote says how to declare the section: with the job.
        assert "# Pricing to the job's sections at the end of this module" in module
        assert module.count(PLUG) == 1 and module.count(PLAIN_JOB) == 1
        at = module.index("\ndef lookup_client")
        module = module[:at] + MODEL + module[at:].replace(PLUG, OWN_PLUG)
        module_path.write_text(module.replace(PLAIN_JOB, OWN_JOB))
        conf_path = copy / "conf" / "base" / "orders.yaml"
        conf_text = conf_path.read_text()
        assert "# pricing:\n#   table: conf/prices.csv\n" in conf_text
        # The demo client's section goes with it.
        demo = "demo_service:\n  url: http://127.0.0.1:8765\n"
        assert conf_text.count(demo) == 1
        conf_text = conf_text.replace(demo, "")
        conf_path.write_text(conf_text + yaml.safe_dump(
            {"pricing": {"table": str(table), "api_token": "${env:PRICING_TOKEN}"}}
        ))  # fmt: skip

        shown = Started([*CLI, "config", "show", "orders"], env=env, cwd=copy)
        assert shown.wait(60) == 0, shown.output
        outputs["config show"] = shown.output
        rows = {line.split()[0]: line for line in shown.lines if line.startswith("pricing.")}
        assert rows["pricing.api_token"].split()[1] == "******"
        assert rows["pricing.api_token"].endswith("# conf/base/orders.yaml -> env PRICING_TOKEN")
        assert rows["pricing.table"].split()[1] == str(table)

        # The generated tests after the swap: the smoke test skips, naming its one place to
        # change...
        logic, smoke = "tests/unit/test_job_orders_logic.py", "tests/integration/test_job_orders.py"
        skipped = _pytest(copy, env, smoke)
        outputs["smoke test before its change"] = skipped.output
        assert skipped.proc.returncode == 0, skipped.output[-3000:]
        assert "1 skipped" in skipped.output
        assert (
            "needs a test instance of the service a PriceTable calls: `service` in "
            "tests/integration/test_job_orders.py starts it and returns the --set lines it needs"
        ) in skipped.output
        # ...and passes once that place is changed; the logic test passes as generated.
        smoke_path = copy / smoke
        text = smoke_path.read_text()
        body = re.search(r"    client = lookup_client\(.*?\n    return \[f\"demo_service.*?\]\n",
                         text, re.S)  # fmt: skip
        assert body, text
        smoke_path.write_text(text.replace(body.group(0), "    return []  # needs no service\n"))
        (copy / "tests" / "unit" / "test_orders_prices.py").write_text(REAL_CLIENT_TEST)
        passed = _pytest(copy, env, logic, smoke, "tests/unit/test_orders_prices.py", client_tests)
        outputs["the generated tests"] = passed.output
        assert passed.proc.returncode == 0, passed.output[-3000:]
        # ...and the demo client's tests skip, naming the file for the team's own.
        assert "4 passed, 4 skipped" in passed.output
        assert (
            "tests of the demo client, and the job's is a PriceTable: write its tests in "
            "tests/unit/test_job_orders_client.py"
        ) in passed.output

        # On Kafka with `pipelines run`: exact, read with read_committed.
        values = demo_values(240, bad_every=40)
        create_topics(kafka, {names(t): 2 for t in ("in", "out", "dlq", "out2", "dlq2")})
        produce(kafka, names("in"), values)
        sets = [*topic_args(kafka, names, dead_letters=True),
                "--set", "source.bounded=true", "--set", "checkpoint.interval=1s"]  # fmt: skip
        ran = Started([*CLI, "run", "orders", *sets], env=env, cwd=copy)
        assert ran.wait(300) == 0, ran.output[-3000:]
        outputs["pipelines run"] = ran.output
        _assert_exact(kafka, names("out"), names("dlq"), values)

        # As a package, through SUBMIT.sh, on the cluster: its own topics, group and prefix.
        package = tmp_path / "orders-package"
        sets2 = [
            *topic_args(kafka, names, out="out2", tx_suffix="-2", dead_letters=True),
            "--set", f"source.group_id={names('group')}-2",
            "--set", f"sink.dead_letter_topic={names('dlq2')}",
            "--set", "source.bounded=true", "--set", "checkpoint.interval=1s",
        ]  # fmt: skip
        packaged = Started([*CLI, "package", "orders", *sets2, "--out", str(package)],
                           env=env, cwd=copy)  # fmt: skip
        assert packaged.wait(120) == 0, packaged.output
        outputs["pipelines package"] = packaged.output
        shipped = yaml.safe_load((package / "conf" / "base" / "orders.yaml").read_text())
        assert shipped["pricing"] == {"table": str(table), "api_token": "${env:PRICING_TOKEN}"}
        assert (
            "- environment variable PRICING_TOKEN: pricing.api_token (set where SUBMIT.sh runs "
            "and on every TaskManager)\n"
        ) in (package / "README.md").read_text()
        submit = Started(
            [str(package / "SUBMIT.sh"), "--skip-preflight"],
            env={
                "PYTHONPATH": str(CANARY_DIR),
                "CANARY_PICKLES": str(pickles),
                "JOBMANAGER": second_cluster,
                "FLINK_HOME": str(flink_home()),
                "PYTHON": sys.executable,
                "PRICING_TOKEN": TOKEN,
            },  # fmt: skip
            cwd=tmp_path,
        )
        assert submit.wait(300) == 0, submit.output[-3000:]
        outputs["SUBMIT.sh"] = submit.output
        job_id = re.search(r"Job has been submitted with JobID (\w+)", submit.output).group(1)
        _assert_exact(kafka, names("out2"), names("dlq2"), values)
    finally:
        sampler.stop()

    # Where the token must not be.
    found: list[str] = [f"on a command line: {line[:300]}" for line in sampler.found.values()]
    secret = {"token": TOKEN.encode()}
    for what, text in outputs.items():
        found += [f"in the output of {what}" for _ in hits(text.encode(), secret)]
    for root, label in ((package, "the package"), (copy / ".local", "the copy's local state"),
                        (STATE / "log", "the cluster's logs")):  # fmt: skip
        for path in (p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            found += [f"in {label}: {path}" for _ in hits(path.read_bytes(), secret)]
    base = f"http://{second_cluster}"
    for path, body in rest_configs(base, job_id).items():
        found += [f"in the cluster's REST {path}" for _ in hits(body, secret)]
    # The package as a deploy image (deploy/Dockerfile), every layer.
    from pipelines_dev.containers import build_deploy_image, docker, docker_problem

    problem = docker_problem(timeout=10)
    if problem is None:
        image = f"pipelines-test-orders:{secrets.token_hex(4)}"
        try:
            before, layers = layers_present(), ImageLayers()
            build_deploy_image(package, "orders", tag=image)
            for where, data in image_files(image, before, layers):
                found += [f"in the deploy image: {where}" for _ in hits(data, secret)]
            assert set(layers.scanned + layers.skipped) == set(image_layers(image))
            assert layers.scanned, "the package's layer was not built here"
        finally:
            docker("rmi", "--force", image, check=False)
    elif os.environ.get("PIPELINES_TEST_BROKER") == "container":
        pytest.fail(f"the deploy image cannot be checked: {problem}")
    carried = [decoded(p.read_bytes()) for p in pickles.iterdir()]
    assert carried, "no pickled functions were recorded"
    found += [f"in a pickled function ({i})" for i, data in enumerate(carried) if TOKEN.encode()
              in data]  # fmt: skip
    assert any(b"${env:PRICING_TOKEN}" in data for data in carried), "the reference is not carried"
    print(f"[own settings] command-line samples: {sampler.rounds}; pickles: {len(carried)}")
    assert sampler.rounds > 50, "the command lines were hardly sampled"
    assert not found, "\n".join(found)
    with urllib.request.urlopen(f"{base}/jobs/{job_id}", timeout=10) as response:
        assert json.load(response)["state"] == "FINISHED"
