"""The template's public API, pinned: what a job may import (each public module's `__all__`)
and the signature of every callable in it. A change here is a change users feel: make it on
purpose, then regenerate the pin (`python -m tests.unit.test_public_api >
tests/unit/public_api.txt`) so the diff shows in review. The jobs, the Beam pipeline and the
files `pipelines-dev new` writes import nothing else from the project."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import inspect
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PIN = Path(__file__).with_name("public_api.txt")

PUBLIC = {
    # What a job imports (docs/api.md), and the stages it reaches as `api.stages`.
    "pipelines.api": [
        "BatchEnrichmentClient", "ConfigError", "EnrichmentClient", "EnrichmentFailed",
        "FieldType", "Job", "JobError", "JobSection", "PermanentLookupError", "Settings",
        "TransientLookupError", "stages",
    ],
    "pipelines.stages": [
        "Batches", "Records", "Rows", "StageError", "dead_letter_sink", "enrich", "kafka_sink",
        "kafka_source", "late_record_sink", "parse", "parse_and_enrich", "parse_for_enrichment",
        "raw_kafka_sink", "records", "require", "window_counts",
    ],
    # What a job's tests import.
    "pipelines.testing": ["TOPIC", "Output", "Record", "Written", "run", "settings_for"],
    # The demo job's own client and section (a job's client module, not the framework's),
    # and the Beam pipeline's transforms.
    "pipelines.lookups.http_demo": ["DemoHttpClient", "DemoService", "http_error"],
    "pipelines.beam.transforms": [
        "ConfigUnsupported", "EnrichRecords", "ParseRecords", "ReadRecords", "WriteRecords",
        "consumer_config",
    ],
}  # fmt: skip

# Test support the generated tests use; not API for a job (a job never imports pipelines_dev).
TEST_SUPPORT = {"pipelines_dev.demo", "pipelines_dev.topics",
                "pipelines_dev.enrichment_service"}  # fmt: skip

# The settings' keys are pinned by the configuration reference test.
SIGNATURES_OF = list(PUBLIC)


def _describe(qualified: str, obj: object) -> list[str]:
    if inspect.isclass(obj):
        if dataclasses.is_dataclass(obj):
            fields = ", ".join(f"{f.name}: {f.type}" for f in dataclasses.fields(obj))
            lines = [f"{qualified}({fields})"]
        else:
            bases = ", ".join(b.__name__ for b in obj.__bases__)
            lines = [f"class {qualified}({bases})"]
        for name, member in sorted(vars(obj).items()):
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                lines.append(f"{qualified}.{name}: property")
            elif inspect.isfunction(member):
                if name == "__init__" and (
                    dataclasses.is_dataclass(obj) or getattr(obj, "_is_protocol", False)
                ):
                    continue  # its fields say it, or it has none (a Protocol)
                lines.append(f"{qualified}.{name}{inspect.signature(member)}")
        return lines
    if callable(obj) and inspect.isfunction(obj):
        return [f"{qualified}{inspect.signature(obj)}"]
    return [f"{qualified} = {obj!r}"]


def describe() -> str:
    """Every public callable's signature, one per line (classes: their public methods)."""
    lines = []
    for module_name in SIGNATURES_OF:
        module = importlib.import_module(module_name)
        for name in sorted(module.__all__):
            lines += _describe(f"{module_name}.{name}", getattr(module, name))
    return "\n".join(lines).replace(str(ROOT), "<root>") + "\n"


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_each_public_module_declares_what_is_pinned(module_name):
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(PUBLIC[module_name])
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == [], f"{module_name}.__all__ names what it does not define"


def test_signatures_match_the_pin():
    now = describe()
    diff = "".join(
        difflib.unified_diff(
            PIN.read_text().splitlines(True), now.splitlines(True), "pinned", "now"
        )
    )
    assert not diff, (
        "the public API changed; if that is meant, regenerate tests/unit/public_api.txt "
        f"(python -m tests.unit.test_public_api > tests/unit/public_api.txt):\n{diff}"
    )


def _project_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each `from pipelines... import name` and `import pipelines...`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipelines"):
            for alias in node.names:
                found.append((node.module, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("pipelines")]
    return found


TEMPLATES = sorted(
    [
        *(ROOT / "pipelines" / "jobs").glob("[a-z]*.py"),
        ROOT / "pipelines" / "beam" / "enrich.py",
        *(ROOT / "pipelines_dev" / "scaffold").glob("[a-z]*.py"),
    ]
)


def _api_objects() -> set[int]:
    api = importlib.import_module("pipelines.api")
    return {id(getattr(api, name)) for name in api.__all__}


def public_use_problems(path: Path) -> list[str]:
    """What `path` imports from the project that is not public: a name is public where a
    public module lists it, or where it is the object pipelines.api exports (the Beam
    pipeline, which may not import the api's Flink side, reaches the same classes from
    their modules)."""
    problems = []
    test_file = path.parent.name == "scaffold"
    exported = _api_objects()
    for module, name in _project_imports(path):
        if module == "pipelines" and f"pipelines.{name}" in PUBLIC:
            continue  # from pipelines import stages
        if module in PUBLIC and name in PUBLIC[module]:
            continue
        if test_file and module in TEST_SUPPORT:
            continue
        if test_file and module == "pipelines.jobs.TEMPLATE_JOB":
            continue  # a job's tests import the job's own module
        if name and id(getattr(importlib.import_module(module), name, None)) in exported:
            continue
        problems.append(f"{path.name}: {module}.{name or '*'} is not public API")
    return problems


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_users_copy_imports_only_the_public_api(path):
    assert public_use_problems(path) == []


def test_a_private_import_is_found(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "from pipelines import stages\nfrom pipelines.records.parse import parse_value\n"
        "from pipelines.running.runner import run_local, job_main\n"
        "from pipelines_dev.topics import read_all\n"
    )
    assert public_use_problems(job) == [
        "job.py: pipelines.records.parse.parse_value is not public API",
        "job.py: pipelines.running.runner.run_local is not public API",
        "job.py: pipelines.running.runner.job_main is not public API",
        "job.py: pipelines_dev.topics.read_all is not public API",
    ]


if __name__ == "__main__":
    print(describe(), end="")
