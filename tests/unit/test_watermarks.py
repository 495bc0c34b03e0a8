"""The watermark strategy keeps its timestamp assigner whatever order the options take."""

from __future__ import annotations

import json

import pytest

from pipelines.settings import WatermarkSettings
from pipelines.watermarks import watermark_strategy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("idleness", [2000, None])
def test_assigner_survives_idleness(idleness):
    strategy = watermark_strategy(WatermarkSettings(idleness=idleness, event_time_field="at"))
    assigner = strategy._timestamp_assigner
    assert assigner is not None
    assert assigner.extract_timestamp(json.dumps({"at": 1234}), 0) == 1234
    text = str(strategy._j_watermark_strategy.getClass().getName())
    assert text  # a real Java strategy object exists behind it
