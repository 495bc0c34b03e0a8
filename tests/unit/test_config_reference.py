"""docs/configuration.md documents every config key the settings accept, with the default
the code has; docs/performance.md's table is the committed benchmark result."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import PydanticUndefined

from pipelines.settings import Settings
from pipelines.settings.values import DURATION_FIELDS, format_ms

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "configuration.md").read_text()
PERFORMANCE = ROOT / "docs" / "performance.md"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        inner = [a for a in getattr(annotation, "__args__", ()) if isinstance(a, type)]
        sub = annotation if isinstance(annotation, type) else (inner[0] if inner else None)
        if isinstance(sub, type) and issubclass(sub, BaseModel) and name != "offsets":
            keys += _keys(sub, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


@pytest.mark.parametrize("key", _keys(Settings))
def test_key_is_documented(key):
    assert f"`{key}`" in REFERENCE


def test_the_performance_table_is_the_committed_benchmark_result():
    """The page's table is bench/results/compare.txt as `make bench` wrote it (copied in by
    `python -m bench.compare --page`), never figures typed by hand."""
    from bench.compare import BLOCK, PAGE, RESULTS, page_with_table

    assert PAGE == PERFORMANCE
    page = PERFORMANCE.read_text()
    assert BLOCK[0] in page
    assert page_with_table(page, (RESULTS / "compare.txt").read_text()) == page


def test_the_fault_table_is_the_committed_chaos_result():
    from bench.chaos import BLOCK, PAGE, RESULTS
    from bench.compare import page_with_table

    page = PAGE.read_text()
    assert BLOCK[0] in page
    assert page_with_table(page, (RESULTS / "chaos.txt").read_text(), BLOCK) == page


# ------------------------------------------------------------------ the defaults it states


def _table_rows() -> dict[str, str]:
    table = REFERENCE[REFERENCE.index("## Every key") : REFERENCE.index("## Preflight rules")]
    rows = {}
    for line in table.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.*?) \| ", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


def _defaults(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[object, str]]:
    found = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        inner = [a for a in getattr(annotation, "__args__", ()) if isinstance(a, type)]
        sub = annotation if isinstance(annotation, type) else (inner[0] if inner else None)
        if isinstance(sub, type) and issubclass(sub, BaseModel) and name != "offsets":
            found.update(_defaults(sub, f"{prefix}{name}."))
            continue
        value = field.default_factory() if field.default_factory is not None else field.default
        found[f"{prefix}{name}"] = (value, name)
    return found


def _shown(value: object, name: str) -> str:
    """A default as the reference writes it (the way `config show` prints values)."""
    if value is PydanticUndefined:
        return "—"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, int) and name in DURATION_FIELDS:
        return format_ms(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v, k)}" for k, v in value.items()) + "}"
    if value == []:
        return "[]"
    return str(value)


# Rows whose default cell says what a null or an empty default means rather than printing
# it; both sides are pinned, so a change to the code or to the reference fails here.
DESCRIBED = {
    "job.name": ("—", "the job"),
    "source.topics": ("[]", "—"),
    "source.max_poll_records": (
        "null",
        "enrichment.capacity in jobs with enrichment, else Kafka's 500",
    ),
    "checkpoint.storage": (
        "null",
        "null: `.local/checkpoints/{job}` where the job runs, resolved at run time",
    ),
    "checkpoint.savepoints": ("null", "null: `.local/savepoints/{job}` where the job runs"),
    "sink.dead_letter_max_bytes": ("null", "max.request.size"),
    "python.bundle_size": (
        "null",
        "enrichment elements in flight in jobs with enrichment, else Flink's 1000",
    ),
}


def test_the_key_table_has_a_row_for_each_key_and_no_other():
    assert sorted(_table_rows()) == sorted(_keys(Settings))


@pytest.mark.parametrize("key", sorted(_defaults(Settings)))
def test_the_default_the_reference_states_is_the_codes(key):
    value, name = _defaults(Settings)[key]
    code, cell = _shown(value, name), _table_rows()[key]
    if key in DESCRIBED:
        assert (code, cell) == DESCRIBED[key]
        return
    # "100 (the enrich job: 4000)": the code's default, then what a job's base config sets.
    match = re.fullmatch(r"(.+?) \((.*)\)", cell)
    stated, note = (match.group(1), match.group(2)) if match else (cell, "")
    assert stated == code, f"the reference says {cell!r}, the code's default is {code!r}"
    for job, value in re.findall(r"the (\w+) job: (\S+)", note):
        base = yaml.safe_load((ROOT / "conf" / "base" / f"{job}.yaml").read_text())
        section, field = key.split(".", 1)
        assert str(base[section][field]) == value, f"conf/base/{job}.yaml {key}"
