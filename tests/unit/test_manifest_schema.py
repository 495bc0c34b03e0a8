"""Every FlinkDeployment the project ships passes the Flink Kubernetes Operator's own CRD
schema (from its pinned API jar, strict as `kubectl apply --validate=strict`), and a
wrong field fails with its path (pipelines_dev/schemas.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pyflink.version
import pytest
import yaml

from pipelines_dev.schemas import FLINK_VERSIONS, manifest_problems, served_flink_versions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _flink_deployments() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "deploy").rglob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "FlinkDeployment":
                found.append((str(path.relative_to(ROOT)), doc))
    return found


@pytest.fixture(scope="module")
def enrich() -> dict:
    (doc,) = [d for p, d in _flink_deployments() if p == "deploy/kubernetes/enrich.yaml"]
    return doc


def test_every_flink_deployment_the_project_ships_passes_the_operators_schema():
    shipped = _flink_deployments()
    assert [p for p, _ in shipped] == ["deploy/kubernetes/enrich.yaml"]
    assert {p: manifest_problems(d) for p, d in shipped} == {p: [] for p, _ in shipped}


def _set(doc: dict, path: str, value) -> dict:
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return out


def _renamed(doc: dict, path: str, new: str) -> dict:
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[new] = node.pop(last)
    return out


@pytest.mark.parametrize(
    ("wrong", "problem"),
    [
        (lambda d: _renamed(d, "spec.jobManager", "jobManger"),
         "spec: Additional properties are not allowed ('jobManger' was unexpected)"),
        (lambda d: _renamed(d, "metadata.name", "nmae"),
         "metadata: Additional properties are not allowed ('nmae' was unexpected)"),
        (lambda d: _set(d, "spec.job.upgradeMode", "sometimes"),
         "spec.job.upgradeMode: 'sometimes' is not one of "
         "['last-state', 'savepoint', 'stateless']"),
        (lambda d: _set(d, "spec.taskManager.resource.memory", 4096),
         "spec.taskManager.resource.memory: 4096 is not of type 'string'"),
        (lambda d: _set(d, "spec.podTemplate.spec.containers.0.ports.0.containerPort", "9249"),
         "spec.podTemplate.spec.containers.0.ports.0.containerPort: '9249' is not of type "
         "'integer'"),
        (lambda d: _renamed(d, "spec.podTemplate.spec.containers.0.env", "envs"),
         "spec.podTemplate.spec.containers.0: Additional properties are not allowed "
         "('envs' was unexpected)"),
        (lambda d: _set(d, "spec.flinkVersion", "v1_20"),
         "spec.flinkVersion: 'v1_20' is not one of ['v2_2'] "
         "(pipelines_dev/schemas.py FLINK_VERSIONS)"),
    ],
    ids=["misspelt-field", "misspelt-metadata", "bad-enum", "wrong-type", "port-as-string",
         "misspelt-container-field", "flink-version"],
)  # fmt: skip
def test_a_wrong_field_is_refused_with_its_path(enrich, wrong, problem):
    assert manifest_problems(wrong(enrich)) == [problem]


def test_flink_version_names_the_flink_the_image_runs(enrich):
    """The one field the served CRD cannot check: its value is the PyFlink the project pins,
    and the pinned CRD (operator 1.10.0) still refuses it. When a newer operator-api jar is
    pinned whose enum has it, this fails: drop the exception in pipelines_dev/schemas.py."""
    value = enrich["spec"]["flinkVersion"]
    flink, operator = FLINK_VERSIONS[value]
    assert pyflink.version.__version__.startswith(flink + "."), (value, pyflink.version.__version__)
    assert operator == "1.13.0"
    assert value not in served_flink_versions()
    assert served_flink_versions()[-1] == "v1_20"
