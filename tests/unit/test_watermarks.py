"""The watermark strategy keeps its timestamp assigner whatever options are set."""

from __future__ import annotations

import pytest

from pipelines.flink.watermarks import watermark_strategy
from pipelines.settings import WatermarkSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("idleness", [2000, None])
def test_assigner_survives_idleness_and_reads_the_configured_field(flink_env, idleness):
    strategy = watermark_strategy(WatermarkSettings(idleness=idleness, event_time_field="at"))
    assigner = strategy.createTimestampAssigner(None)
    assert assigner.extractTimestamp('{"id":1,"at":1234}', 0) == 1234
