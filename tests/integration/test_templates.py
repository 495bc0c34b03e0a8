"""A job made by `pipelines-dev new` from each template passes its own generated tests at once,
in a fresh copy of the project (so nothing here leaks into the working tree). A job whose
client and settings a team replaced is test_own_settings_job.py's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.helpers import cli, fresh_copy

pytestmark = pytest.mark.integration


TEMPLATES = {"enrich": 7, "windowed": 3, "passthrough": 3, "beam-enrich": 1}  # tests each writes


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
        if template == "enrich":  # and the tests of its own lookup client
            tests[template].append(f"tests/unit/test_job_{name}_client.py")
            assert f"created {tests[template][2]}" in made.stdout
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
