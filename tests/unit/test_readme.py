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
