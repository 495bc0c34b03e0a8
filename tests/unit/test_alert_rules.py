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
    alerts = {rule["alert"] for rule in _alert_rules()}
    firing, silent = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == alerts
    assert silent == alerts


def _alert_rules() -> list[dict]:
    return [
        rule
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def test_every_alert_waits_with_a_for_or_says_why_it_does_not():
    """An alert without `for:` pages on one evaluation; that must be a decision its
    description states, not an omission."""
    unexplained = [
        rule["alert"]
        for rule in _alert_rules()
        if "for" not in rule and "No `for:`" not in rule["annotations"]["description"]
    ]
    assert unexplained == []


def test_a_healthy_start_is_checked_against_every_alert_for_ten_minutes():
    """The promtool case that pages nothing on a deployment (first triggers declined while
    tasks start, then completions) asks every alert, early and late."""
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    (healthy,) = [c for c in cases if c["name"] == "a healthy start fires nothing"]
    asked: dict[str, set[str]] = {}
    for check in healthy["alert_rule_test"]:
        assert check["exp_alerts"] == [], check
        asked.setdefault(check["alertname"], set()).add(check["eval_time"])
    assert set(asked) == {rule["alert"] for rule in _alert_rules()}
    assert all({"1m", "12m"} <= times for times in asked.values()), asked
    failed = [s["values"] for s in healthy["input_series"] if "FailedCheckpoints" in s["series"]]
    assert failed and failed[0].startswith("0 1 2 3"), "the start's declined triggers"


def test_prometheus_loads_every_rule_file():
    assert rule_files() == [RULES]
