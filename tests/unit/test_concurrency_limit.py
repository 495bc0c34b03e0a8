"""The flowing stage's adaptive in-flight bound (pipelines.lookups.concurrency), as pure logic:
round trips in, a limit out."""

from __future__ import annotations

import pytest

from pipelines.lookups.concurrency import GradientLimit

pytestmark = pytest.mark.unit


def run(limit: GradientLimit, rtts: list[float], busy: bool = True) -> list[int]:
    """Feed round trips, each measured with the stage at its bound (busy) or nearly idle."""
    return [limit.update(rtt, limit.value if busy else 0) for rtt in rtts]


def test_flat_round_trips_at_the_bound_grow_it_to_its_ceiling_and_no_further():
    limit = GradientLimit(start=16, low=16, high=128)
    values = run(limit, [0.5] * 200)
    assert values == sorted(values)  # only up
    assert values[5] > 16 and values[-1] == 128


def test_a_stage_not_using_its_bound_never_grows_it():
    limit = GradientLimit(start=16, low=16, high=128)
    assert set(run(limit, [0.5] * 200, busy=False)) == {16}


def test_round_trips_rising_past_the_tolerance_shrink_it_then_become_the_new_baseline():
    limit = GradientLimit(start=16, low=4, high=128)
    run(limit, [0.05] * 100)
    assert limit.value == 128
    values = run(limit, [0.05 * 4] * 30)  # the service four times slower under the load
    assert values == sorted(values, reverse=True) and values[-1] < 128 / 2
    # A slower service for good: the long-run average follows it, so the limit grows again.
    assert run(limit, [0.05 * 4] * 400)[-1] == 128


def test_it_never_leaves_its_floor_and_ceiling():
    limit = GradientLimit(start=16, low=8, high=32)
    assert min(run(limit, [0.01] * 5 + [10.0] * 50)) == 8
    assert max(run(limit, [0.01] * 500)) == 32


def test_round_trips_within_the_tolerance_do_not_shrink_it():
    limit = GradientLimit(start=16, low=4, high=128)
    run(limit, [0.1] * 100)
    assert set(run(limit, [0.14, 0.1] * 50)) == {128}


@pytest.mark.parametrize("start,low,high", [(8, 16, 32), (64, 16, 32), (0, 0, 4)])
def test_bounds_out_of_order_are_refused(start, low, high):
    with pytest.raises(ValueError, match="need 1 <= low"):
        GradientLimit(start, low, high)
