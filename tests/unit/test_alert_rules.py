"""The alert rules a team deploys (deploy/prometheus/) are checked and unit-tested with
Prometheus's own promtool: each alert fires on the series that should page and stays
silent on a healthy job beside it. One fires for real in tests/integration/test_metrics.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from pipelines_dev.prometheus import RULES_DIR, binary, rule_files

pytestmark = pytest.mark.unit

RULES = RULES_DIR / "pipelines.rules.yml"
RULE_TESTS = RULES_DIR / "pipelines.rules.test.yml"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("promtool"), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )


def test_the_rules_are_valid():
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 11 rules found" in done.stdout


def test_every_alert_passes_its_promtool_test():
    done = _promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_test_that_fires_it_and_one_that_does_not():
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    firing, silent = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == alerts
    assert silent == alerts


def test_prometheus_loads_every_rule_file():
    assert rule_files() == [RULES]
