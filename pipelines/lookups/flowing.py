"""The flowing enrichment stage: lookups on an event loop of the stage's own, so that thread
mode can run it (PyFlink runs no AsyncFunction there) and neither mode waits on a batch.

`enrichment.operator: flowing`. A plain ProcessFunction over batches of Kafka rows (the
batcher's, with drain markers: jars/src RowBatching):

- each batch is parsed on the task thread and its valid records handed to the loop thread
  (`LoopThread`) as one `RecordEnricher.many` call, which applies the same timeouts,
  retries and failure policy as the batched operator;
- lookups stay in flight across batches, up to `enrichment.elements_in_flight()` batches
  (the same bound as the batched operator's async queue); a batch that would exceed it
  waits for one to finish (the oldest, with `enrichment.ordered`). With
  `enrichment.max_capacity` the bound adapts to the round trips it measures, up to that
  (pipelines.lookups.concurrency);
- every call emits the answers of the batches that have completed since the last one (in
  the batches' order with `enrichment.ordered`);
- an empty batch is the batcher's drain marker: it comes after the last batch before every
  checkpoint barrier, watermark and the end of input, and after `batch_delay` of quiet.
  The stage answers it by waiting for every lookup in flight and emitting its answers, so
  when the barrier passes the stage holds nothing: exactly once needs no state here.

A drain waits at most the worst case of one record (all attempts and backoffs) plus a
margin; longer means the loop is stuck, and the stage fails the task (the restart strategy
and the checkpoint take over).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any

from pipelines.flink.rows import column_rows, is_thread_mode
from pipelines.lookups import ClientFactory
from pipelines.lookups.concurrency import GradientLimit
from pipelines.lookups.enrichment import enricher_for, rewrap, stage_parser, worst_case_ms
from pipelines.records.lines import DEAD_MARK, join_lines
from pipelines.settings import Settings

# Beyond one record's worst case: how long a drain may wait before the loop counts as stuck.
DRAIN_MARGIN_S = 30.0


class LoopThread:
    """An asyncio event loop running on a daemon thread of its own, for a stage whose task
    thread must not run it (thread mode's task thread belongs to the JVM)."""

    def __init__(self, name: str = "enrichment-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, last: Coroutine[Any, Any, Any] | None = None, timeout_s: float = 10.0) -> None:
        """Run `last` (a client's close) on the loop, cancel what is left, stop and join the
        thread: nothing of the stage runs after its task ends (in thread mode a Python
        thread outliving the task's interpreter would crash the JVM)."""
        if not self._thread.is_alive():
            return
        for step in (last, self._cancel_the_rest()):
            if step is None:
                continue
            try:
                self.submit(step).result(timeout_s)
            except Exception:  # noqa: BLE001 - closing: the loop is stopped whatever happened
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()

    @staticmethod
    async def _cancel_the_rest() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class InFlight:
    """Batches whose lookups run on the loop, used from the task thread only: answers come
    out as their batches complete, or in the order the batches came with `ordered`
    (`enrichment.ordered`). The bound is fixed, or adapts with `adapt`."""

    def __init__(
        self,
        loop: LoopThread,
        limit: int,
        drain_timeout_s: float,
        ordered: bool,
        adapt: GradientLimit | None = None,
    ):
        self.loop = loop
        self._fixed = limit
        self.adapt = adapt
        self.drain_timeout_s = drain_timeout_s
        self.ordered = ordered
        self._batches: deque[tuple[list[str], concurrent.futures.Future, float]] = deque()

    @property
    def limit(self) -> int:
        return self._fixed if self.adapt is None else self.adapt.value

    def __len__(self) -> int:
        return len(self._batches)

    def start(self, metas: list[str], coro: Coroutine[Any, Any, list[str]]) -> None:
        future = self.loop.submit(coro)
        if self.adapt is not None:  # the round trip ends on the loop, not when we look
            future.add_done_callback(_stamp_end)
        self._batches.append((metas, future, time.monotonic()))

    def completed(self, at_most: int | None = None) -> Iterator[str]:
        """A batch's answers as one element each: of the batches completed by now, then,
        while more than `at_most` remain in flight (None: the limit), of the next ones to
        complete. A failed batch (the policy `fail`, or too many unexpected errors) raises."""
        bound = self.limit if at_most is None else at_most
        batches = self._batches
        while batches:
            if self.ordered:
                ready = [batches[0]] if batches[0][1].done() else []
            else:
                ready = [b for b in batches if b[1].done()]
            if not ready:
                if len(batches) <= bound:
                    return
                waiting = [batches[0][1]] if self.ordered else [b[1] for b in batches]
                done, _ = concurrent.futures.wait(
                    waiting, self.drain_timeout_s, concurrent.futures.FIRST_COMPLETED
                )
                if not done:
                    raise TimeoutError(
                        f"enrichment: {len(batches)} batches still in flight after "
                        f"{self.drain_timeout_s:g} s; the lookup loop is stuck"
                    )
                continue
            for batch in ready:
                if self.adapt is not None:
                    ended = getattr(batch[1], "ended", None) or time.monotonic()
                    self.adapt.update(ended - batch[2], len(batches))
                batches.remove(batch)
                metas, future, _ = batch
                yield join_lines(map(rewrap, metas, future.result()))

    def drain(self) -> Iterator[str]:
        return self.completed(at_most=0)


def _stamp_end(future: concurrent.futures.Future) -> None:
    future.ended = time.monotonic()  # type: ignore[attr-defined]


def adaptive_limit(settings: Settings) -> GradientLimit | None:
    """The flowing stage's adaptive bound in batches, or None for a fixed `capacity`."""
    cfg = settings.enrichment
    if cfg.max_capacity is None or cfg.max_capacity == cfg.capacity:
        return None
    start = cfg.elements_in_flight()
    return GradientLimit(start, start, max(start, cfg.max_capacity // cfg.effective_batch_size()))


def make_flowing_function(settings: Settings, client_factory: ClientFactory, columns: bool):
    """The flowing stage's ProcessFunction over batches of Kafka rows (lists of rows; with
    `columns`, thread mode's one row of columns). Each output element is JSON lines as the
    batched operator's: enriched records, and both steps' dead letters marked."""
    from pyflink.datastream.functions import ProcessFunction

    cfg = settings.enrichment

    class FlowingEnrich(ProcessFunction):
        def open(self, runtime_context):
            self.parser = stage_parser(settings, runtime_context)
            self.enricher = enricher_for(settings, client_factory)
            stats = self.enricher.stats
            stats.register(runtime_context, counters=is_thread_mode(runtime_context))
            self.loop = LoopThread()
            self.in_flight = InFlight(
                self.loop,
                cfg.elements_in_flight(),
                worst_case_ms(cfg) / 1000 + DRAIN_MARGIN_S,
                cfg.ordered,
                adaptive_limit(settings),
            )

        def process_element(self, value, ctx):
            rows = column_rows(value) if columns else value
            dead: list[str] = []
            metas: list[str] = []
            records: list[dict] = []
            parsed = self.parser.record
            for row in rows:
                got = parsed(row)
                if isinstance(got, str):
                    dead.append(DEAD_MARK + got)
                else:
                    metas.append(got[0])
                    records.append(got[1])
            stats = self.enricher.stats
            if dead:
                stats.add("deadLetters", len(dead))  # the operator's one count of them
                yield join_lines(dead)
            if records:
                self.in_flight.start(metas, self.enricher.many(records))
                yield from self.in_flight.completed()
            elif not dead:  # the drain marker
                yield from self.in_flight.drain()
            stats.sync()

        def close(self):
            loop = getattr(self, "loop", None)
            if loop is not None:
                loop.close(self.enricher.client.close())

    return FlowingEnrich()
