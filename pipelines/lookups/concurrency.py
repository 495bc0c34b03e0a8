"""How many lookups the flowing stage keeps in flight when `enrichment.max_capacity` lets it
adapt: a gradient limit, sized from the round trips it measures.

A fixed capacity is right for one latency only. By Little's law a stage that keeps C lookups
in flight over a round trip of L seconds enriches at most C / L records a second: the enrich
job's 8,000 allow 160,000/s at 50 ms, far past what the Python stage parses, but 16,000/s at
500 ms, where the stage then waits on the service (measured: 56% of a tuned run). Raising
the default for every job would hold more records in flight where nothing gains from them.

So the limit moves, between `capacity` and `max_capacity`, the way a TCP congestion window
does (the gradient algorithm of Netflix's concurrency-limits, "Gradient2"):

- it grows only while the stage is using it (at least half of it in flight): a stage bound
  by its parse, or by a quiet topic, never holds more than it needs;
- it grows while round trips stay flat against their long-run average, and shrinks in
  proportion when they rise past a tolerance: a service that answers slower under more load
  (its own queue filling) is given less, not more.

It counts batches, the unit the stage hands the loop; the settings count records.
"""

from __future__ import annotations

import math

# A round trip may rise this far above its long-run average before the limit shrinks: the
# service's own jitter and the stage's GIL turns are not load.
RTT_TOLERANCE = 1.5
LONG_WINDOW = 60  # round trips the long-run average spans (an exponential average)
SMOOTHING = 0.2  # how far one round trip moves the limit toward its new estimate


class GradientLimit:
    """The in-flight limit, updated by each batch's round trip (task thread only)."""

    def __init__(self, start: int, low: int, high: int):
        if not 1 <= low <= start <= high:
            raise ValueError(f"need 1 <= low ({low}) <= start ({start}) <= high ({high})")
        self.low, self.high = low, high
        self._limit = float(start)
        self._long_rtt: float | None = None

    @property
    def value(self) -> int:
        return int(self._limit)

    def update(self, rtt_s: float, in_flight: int) -> int:
        """One round trip measured while `in_flight` batches were out; the new limit."""
        if rtt_s <= 0:
            return self.value
        long = self._long_rtt
        long = rtt_s if long is None else long + (rtt_s - long) / LONG_WINDOW
        if long > 2 * rtt_s:  # round trips fell for good (the service got faster): follow
            long = 0.95 * long
        self._long_rtt = long
        if in_flight < self._limit / 2:
            return self.value  # not limited by us: nothing to learn about more
        gradient = max(0.5, min(1.0, RTT_TOLERANCE * long / rtt_s))
        headroom = math.sqrt(self._limit)
        estimate = self._limit * gradient + headroom
        self._limit += SMOOTHING * (estimate - self._limit)
        self._limit = min(float(self.high), max(float(self.low), self._limit))
        return self.value
