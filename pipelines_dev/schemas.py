"""The project's Kubernetes manifests checked against the Flink Kubernetes Operator's own
schema, not against our reading of it.

The operator's API jar (pinned in jars/schemas.txt) carries the FlinkDeployment CRD the
operator installs; its OpenAPI schema is what the API server validates a FlinkDeployment
with. Two things are added to make the check as strict as `kubectl apply
--validate=strict`: an object schema with declared properties refuses keys it does not
declare (the API server reports them as unknown fields; a plain JSON-schema check would
let a misspelt `jobManger:` through), and `x-kubernetes-int-or-string` accepts both.

`flinkVersion` is the one field checked elsewhere: the newest API jar Maven Central serves
here is 1.10.0, whose enum ends at `v1_20`, and Flink 2.2 is `v2_2` (FLINK_VERSIONS).
"""

from __future__ import annotations

import copy
import functools
import logging
import zipfile
from pathlib import Path
from typing import Any

import yaml

from pipelines.host.jars import JarError, fetch_pinned, read_manifest, sha256_of
from pipelines.host.paths import PROJECT_ROOT, local_state

log = logging.getLogger(__name__)

MANIFEST = PROJECT_ROOT / "jars" / "schemas.txt"
CRD = "META-INF/fabric8/flinkdeployments.flink.apache.org-v1.yml"

# The flinkVersion values the project's manifests may use: each with the Flink it names
# and the first operator release whose CRD accepts it (its FlinkVersion enum: 1.10 ends
# at v1_20, 1.11 and 1.12 add v2_0, 1.13 adds v2_1 and v2_2).
FLINK_VERSIONS = {"v2_2": ("2.2", "1.13.0")}


class SchemaError(Exception):
    """A schema jar is missing or not the pinned one; the message says what to run."""


def _jar_path(coordinates: str) -> Path:
    _group, artifact, version = coordinates.split(":")
    return local_state("schemas") / f"{artifact}-{version}.jar"


def fetch() -> list[Path]:
    """Every jar of jars/schemas.txt in .local/schemas/, fetched with mvn where missing,
    each checked against its pinned sha256."""
    paths = []
    for jar in read_manifest(MANIFEST):
        path = _jar_path(jar.coordinates)
        try:
            fetch_pinned(jar.coordinates, path, jar.sha256, "make schemas")
        except JarError as exc:
            raise SchemaError(str(exc)) from None
        log.info(f"ok       {jar.coordinates}")
        paths.append(path)
    return paths


def operator_api_jar() -> Path:
    (jar,) = [
        j for j in read_manifest(MANIFEST) if ":flink-kubernetes-operator-api:" in j.coordinates
    ]
    path = _jar_path(jar.coordinates)
    if not path.is_file():
        raise SchemaError(f"missing {path} ({jar.coordinates}): run `make schemas`")
    if sha256_of(path) != jar.sha256:
        raise SchemaError(f"{path} is not the pinned {jar.coordinates}: run `make schemas`")
    return path


def _strict(schema: Any) -> Any:
    """The schema as the API server applies it with strict field validation."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=1)
def _crd() -> dict:
    """The pinned CRD, parsed once (half a megabyte of YAML)."""
    with zipfile.ZipFile(operator_api_jar()) as jar:
        return yaml.load(jar.read(CRD), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _crd_schema(version: str) -> dict:
    """The OpenAPI schema the pinned CRD gives FlinkDeployment `version` (a copy)."""
    (found,) = [v for v in _crd()["spec"]["versions"] if v["name"] == version]
    return copy.deepcopy(found["schema"]["openAPIV3Schema"])


# What the API server itself validates of every object beside the CRD's spec and status:
# the user-settable fields of ObjectMeta.
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_ROOT = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "generateName": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": _STRINGS,
            "annotations": _STRINGS,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "ownerReferences": {"type": "array", "items": {"type": "object"}},
        },
    },
}


def flink_deployment_schema(version: str = "v1beta1") -> dict:
    """The CRD's OpenAPI schema of FlinkDeployment `version` with ObjectMeta's fields,
    strict, without the enum of flinkVersion (checked against FLINK_VERSIONS instead)."""
    schema = _crd_schema(version)
    schema["properties"]["spec"]["properties"]["flinkVersion"].pop("enum")
    schema["properties"].update(copy.deepcopy(_OBJECT_ROOT))
    return _strict(schema)


def served_flink_versions(version: str = "v1beta1") -> list[str]:
    """The flinkVersion enum of the pinned CRD, as the operator that ships it accepts."""
    return list(_crd_schema(version)["properties"]["spec"]["properties"]["flinkVersion"]["enum"])


def manifest_problems(doc: dict) -> list[str]:
    """What the operator's schema refuses in one FlinkDeployment (each with its path), and
    a flinkVersion outside FLINK_VERSIONS; empty when it is valid."""
    import jsonschema

    group, _, version = doc.get("apiVersion", "").partition("/")
    if group != "flink.apache.org" or doc.get("kind") != "FlinkDeployment":
        return [
            f"not a FlinkDeployment: apiVersion {doc.get('apiVersion')}, kind {doc.get('kind')}"
        ]
    validator = jsonschema.Draft7Validator(flink_deployment_schema(version))
    problems = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))
    ]
    flink = doc.get("spec", {}).get("flinkVersion")
    if flink not in FLINK_VERSIONS:
        problems.append(
            f"spec.flinkVersion: {flink!r} is not one of {sorted(FLINK_VERSIONS)} "
            "(pipelines_dev/schemas.py FLINK_VERSIONS)"
        )
    return problems
