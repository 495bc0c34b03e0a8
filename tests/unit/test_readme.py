"""The README documents every config key the settings accept."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from pipelines.settings import Settings

pytestmark = pytest.mark.unit

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


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
    assert f"`{key}`" in README


def test_the_performance_table_is_the_committed_benchmark_result():
    """README's table is bench/results/compare.txt as `make bench` wrote it (copied in by
    `python -m bench.compare --readme`), never figures typed by hand."""
    from bench.compare import README_BLOCK, RESULTS, readme_with_table

    assert README_BLOCK[0] in README
    assert readme_with_table(README, (RESULTS / "compare.txt").read_text()) == README
