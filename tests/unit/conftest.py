"""Fixtures for unit tests that need PyFlink's gateway (no broker, no job)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def flink_env():
    """A configured environment: the project's jars are on the gateway's class path."""
    from pipelines.flink.environment import create_environment
    from pipelines.settings import load_settings

    return create_environment(load_settings("passthrough", environ={}).settings)
