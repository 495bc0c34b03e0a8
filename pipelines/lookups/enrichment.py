"""The async enrichment stage: slow lookups that never stall checkpoints or offset commits.

A synchronous lookup of L seconds caps a slot at 1/L records/s and, because PyFlink
flushes its bundle before every checkpoint barrier, holds every checkpoint (and so every
offset commit) hostage. Async I/O keeps up to `capacity` lookups in flight; each record's
fate on timeout or error is decided here:

- a transient failure (timeout, connection refused, HTTP 5xx) is retried with backoff
  (`retries`, `backoff`), each attempt bounded by `timeout`; then `enrichment.on_failure`:
  `dead-letter` (the default: the record goes to dead letters with the reason, nothing is
  emitted half-done and the job keeps running), `mark-missing` (emit it with
  `enrichment: null` and the reason), or `fail` (the restart strategy takes over);
- a permanent failure (the service says this record cannot be enriched, e.g. HTTP 4xx)
  is not retried: the record goes to dead letters, whatever the policy;
- an unexpected exception (a bug, or a record shaped in a way the code did not foresee)
  dead-letters that record, and fails the job once `errors.max_unexpected_in_a_row`
  records in a row have failed that way.

Lookups, failed attempts, retries, records marked missing and dead letters are Flink
metrics of the `enrich` operator (gauges: the async thread cannot update Beam counters),
shown in the progress line and the Flink UI.

The lookup itself is the job's: it passes a client factory (pipelines.lookups has the
contract; pipelines.lookups.http_demo is the demo service's client). Nothing here knows a
service's request shape or a record's fields.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from pipelines.flink.metrics import PROJECT_GAUGES
from pipelines.flink.rows import subtask_index
from pipelines.flink.streams import split_lines as split_in_jvm
from pipelines.lookups import (  # noqa: F401 - the errors are part of the stage's interface
    ClientFactory,
    EnrichmentClient,
    EnrichmentFailed,
    PermanentLookupError,
    TransientLookupError,
    has_batch_lookup,
)
from pipelines.records import jsontext
from pipelines.records.lines import DEAD_MARK, join_lines, split_lines, split_meta
from pipelines.records.parse import DEAD_LETTER_OVERHEAD, ErrorBudget, RowParser, record_dead_letter
from pipelines.settings import (
    ConfigError,
    EnrichmentOperator,
    EnrichmentSettings,
    ErrorSettings,
    ExecutionMode,
    OnFailure,
    Settings,
)
from pipelines.settings.secrets import without_secrets


class Coalescer:
    """Lookups started in the same event-loop turn share one `client.lookup_batch` call.

    A batch of records is looked up concurrently, so all of its lookups land in one turn:
    one round trip instead of one per record. Each record still awaits its own result,
    with its own timeout and retries (a retry joins the next round trip). The stage wraps
    a client in this when the client offers `lookup_batch` and `enrichment.coalesce` is
    true; the client never sees a single record's timeout.
    """

    def __init__(self, client):
        self.client = client
        self._pending: list[tuple[dict, asyncio.Future]] = []

    async def lookup(self, record: dict) -> dict:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((record, future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        asyncio.ensure_future(self._send(pending))

    async def lookup_batch(self, records: list[dict]) -> list:
        """One round trip for `records`: one result per record, in order (a failed record's
        entry is its exception), or an error for the whole call."""
        results = list(await self.client.lookup_batch(records))
        if len(results) != len(records):
            raise RuntimeError(
                f"lookup_batch answered {len(results)} results for {len(records)} records"
            )
        return results

    async def _send(self, pending: list[tuple[dict, asyncio.Future]]) -> None:
        try:
            results = await self.lookup_batch([record for record, _ in pending])
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
            for _, future in pending:
                if not future.done():
                    future.set_exception(
                        exc if isinstance(exc, Exception) else TransientLookupError(repr(exc))
                    )
            return
        for (_, future), result in zip(pending, results):
            if future.done():  # timed out already
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def close(self) -> None:
        await self.client.close()


def stage_client(client, cfg: EnrichmentSettings):
    """The client as the stage calls it: coalesced when it can answer batches and
    `coalesce` is on, as it is otherwise."""
    return Coalescer(client) if cfg.coalesce and has_batch_lookup(client) else client


class EnrichStats:
    """Per-subtask counts, exposed as gauges of the enrich operator, or as counters where
    gauges are unsafe (thread mode: flink/rows.py is_thread_mode), brought up to date by
    `sync` on the task thread. Counted from the event-loop thread and the task thread alike."""

    NAMES = PROJECT_GAUGES  # the names a progress line totals (pipelines.flink.metrics)

    def __init__(self) -> None:
        self.counts = dict.fromkeys(self.NAMES, 0)
        self._lock = threading.Lock()
        self._counters: dict[str, Any] = {}
        self._synced = dict.fromkeys(self.NAMES, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def register(self, runtime_context, counters: bool = False) -> None:
        group = runtime_context.get_metrics_group()
        for name in self.NAMES:
            if counters:
                self._counters[name] = group.counter(name)
            else:
                group.gauge(name, lambda name=name: self.counts[name])

    def sync(self) -> None:
        """Counters take what was counted since the last sync (call on the task thread)."""
        for name, counter in self._counters.items():
            now = self.counts[name]
            if now != self._synced[name]:
                counter.inc(now - self._synced[name])
                self._synced[name] = now


def rewrap(meta: str, out: str) -> str:
    """An enriched record keeps its input record's Kafka metadata (pipelines.records.lines.META);
    a dead letter goes out without it."""
    return out if out.startswith(DEAD_MARK) else meta + out


class RecordEnricher:
    """One record through lookup, retries and the failure policy, to the text that goes
    out: the enriched record, or a dead letter marked for SplitLines."""

    def __init__(
        self,
        client: EnrichmentClient,
        cfg: EnrichmentSettings,
        job: str,
        origin_field: str | None,
        errors: ErrorSettings,
        max_record_bytes: int,
    ):
        self.client = client
        self.cfg = cfg
        self.job = job
        self.origin_field = origin_field
        self.budget = ErrorBudget(errors, "enrich")
        self.max_record_bytes = max_record_bytes
        self.stats = EnrichStats()

    def dead_letter(self, record: dict, reason: str) -> str:
        """The record's dead letter with `reason`, marked for SplitLines, and counted."""
        self.stats.add("deadLetters")
        return DEAD_MARK + record_dead_letter(
            record, reason, self.job, "enrich", self.origin_field, self.max_record_bytes
        )

    async def one(self, record: dict, first: object = None) -> str:
        """The record's text out. `first`, when given, is the outcome of its first attempt
        made elsewhere (a profile, or the exception it raised): `many`'s one round trip."""
        try:
            out = await self._enrich(record, first)
        except _Unexpected as wrapped:
            self.stats.add("unexpectedErrors")
            return self.dead_letter(record, self.budget.failed(wrapped.__cause__ or wrapped))
        return self._finish(record, out)

    async def many(self, records: list[dict]) -> list[str]:
        """A batch's texts out, in order. With a client that answers batches (coalesced),
        every record's first attempt is one `lookup_batch` call bounded by the per-attempt
        timeout, with no task, timer or future per record; only records whose first attempt
        failed go through `one` for their retries. Otherwise each record goes through `one`,
        all of them concurrently."""
        if not isinstance(self.client, Coalescer) or len(records) < 2:
            return await asyncio.gather(*map(self.one, records))
        self.stats.add("lookups", len(records))
        results: list[object]
        try:
            async with asyncio.timeout(self.cfg.timeout / 1000):
                results = await self.client.lookup_batch(records)
        except Exception as exc:  # noqa: BLE001 - each record's retries decide what it means
            results = [exc] * len(records)
        outs: list[str] = [""] * len(records)
        failed = []
        # _finish's work inline for the common answer: about 0.5 us a record less, on the
        # loop whose turns the task thread's parse waits for.
        limit = self.max_record_bytes - DEAD_LETTER_OVERHEAD
        dumps = jsontext.dumps
        for i, (record, result) in enumerate(zip(records, results)):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):  # not a lookup's failure: not ours
                    raise result
                failed.append(i)
                continue
            text = dumps({**record, "enrichment": result})
            outs[i] = text if len(text) <= limit else self._too_large(record, len(text))
        if len(failed) < len(records):
            self.budget.ok()
        if failed:
            retried = await asyncio.gather(*(self.one(records[i], results[i]) for i in failed))
            for i, text in zip(failed, retried):
                outs[i] = text
        return outs

    def _finish(self, record: dict, out: dict | str) -> str:
        if isinstance(out, str):  # a dead-letter reason
            return self.dead_letter(record, out)
        self.budget.ok()
        text = jsontext.dumps(out)
        if len(text) > self.max_record_bytes - DEAD_LETTER_OVERHEAD:
            return self._too_large(record, len(text))
        return text

    def _too_large(self, record: dict, size: int) -> str:
        return self.dead_letter(
            record,
            f"the enriched record ({size} bytes) is over what "
            f"the sink may write ({self.max_record_bytes} bytes)",
        )

    def _failure(self, exc: Exception) -> tuple[bool, str]:
        """(permanent, reason) of a failed attempt; a bug or an unforeseen record shape
        raises _Unexpected."""
        if isinstance(exc, asyncio.TimeoutError):
            return False, f"timeout after {self.cfg.timeout} ms"
        if isinstance(exc, PermanentLookupError):
            return True, f"enrichment refused the record: {exc}"
        if isinstance(exc, (EnrichmentFailed, OSError)):
            return False, str(exc) or type(exc).__name__
        raise _Unexpected() from exc

    async def _enrich(self, record: dict, first: object = None) -> dict | str:
        cfg = self.cfg
        reason = "not attempted"
        attempts = cfg.retries + 1
        for attempt in range(1, attempts + 1):
            if attempt == 1 and first is not None:
                outcome = first
            else:
                self.stats.add("lookups")
                try:
                    async with asyncio.timeout(cfg.timeout / 1000):
                        outcome = await self.client.lookup(record)
                except Exception as exc:  # noqa: BLE001 - classified just below
                    outcome = exc
            if not isinstance(outcome, Exception):
                return {**record, "enrichment": outcome}
            permanent, reason = self._failure(outcome)
            self.stats.add("lookupFailures")
            if permanent:
                return reason
            if attempt < attempts:
                self.stats.add("retries")
                await asyncio.sleep(cfg.backoff * (2 ** (attempt - 1)) / 1000)
        message = f"{reason} ({attempts} attempt{'s' if attempts > 1 else ''})"
        if cfg.on_failure is OnFailure.FAIL:
            raise EnrichmentFailed(f"enrichment of record {record.get('id')!r} failed: {message}")
        if cfg.on_failure is OnFailure.DEAD_LETTER:
            return f"enrichment unavailable: {message}"
        self.stats.add("markedMissing")
        return {**record, "enrichment": None, "enrichment_error": message}


class _Unexpected(Exception):
    """Carries an unexpected exception (as __cause__) out of the retry loop."""


def worst_case_ms(cfg: EnrichmentSettings) -> int:
    """How long one record can take through all attempts and backoffs."""
    backoffs = sum(cfg.backoff * (2**i) for i in range(cfg.retries))
    return (cfg.retries + 1) * cfg.timeout + backoffs


def enricher_for(
    settings: Settings, client_factory: ClientFactory, coalesce: bool = True
) -> RecordEnricher:
    """The stage's record enricher over a client the job's factory makes, coalesced (see
    `stage_client`) unless `coalesce` is False. Called where the client is used: on the
    worker, when an operator opens."""
    client = client_factory(settings)
    if coalesce:
        client = stage_client(client, settings.enrichment)
    return RecordEnricher(
        client,
        settings.enrichment,
        settings.job.name,
        settings.parse.origin_field,
        settings.errors,
        settings.sink.max_record_bytes(settings.kafka),
    )


def make_batch_async_function(settings: Settings, client_factory: ClientFactory):
    """An AsyncFunction over batches (pipelines.stages: one JSON record per line): every
    record of a batch looked up concurrently, each with its own timeout and retries, and
    the batch's results sent back as one element, one per line, dead letters marked
    (pipelines.flink.SplitLines takes them apart in the JVM)."""
    from pyflink.datastream.functions import AsyncFunction

    class EnrichBatch(AsyncFunction):
        def open(self, runtime_context):
            self.enricher = enricher_for(settings, client_factory)
            self.enricher.stats.register(runtime_context)

        async def async_invoke(self, value: str):
            metas, records = [], []
            for line in split_lines(value):
                meta, text = split_meta(line)
                metas.append(meta)
                records.append(jsontext.loads(text))
            outs = await self.enricher.many(records)
            return [join_lines(map(rewrap, metas, outs))]

    return EnrichBatch()


def stage_parser(settings: Settings, runtime_context) -> RowParser:
    """The parse inside an enrichment stage, for its subtask: as `pipelines.records.parse`
    parses, each record keeping its Kafka metadata for the sink."""
    return RowParser(
        settings.parse,
        settings.faults,
        settings.job.name,
        subtask=subtask_index(runtime_context),
        errors=settings.errors,
        dead_letter_max_bytes=settings.sink.dead_letter_bytes(settings.kafka),
        carry_metadata=True,
    )


def make_parse_enrich_function(settings: Settings, client_factory: ClientFactory):
    """The batched operator with the parse inside it: an AsyncFunction over batches of Kafka
    rows that parses each row as `pipelines.records.parse` does and looks the valid ones up, all in
    one call of the Python worker. Against a parse stage followed by `EnrichBatch` it saves
    a batch's second crossing of the Java/Python boundary and the second JSON parse of
    every record (30% of the worker's time in the profile). Its one element out holds the
    enriched records and both stages' dead letters, marked (each names its stage)."""
    from pyflink.datastream.functions import AsyncFunction

    class ParseEnrichBatch(AsyncFunction):
        def open(self, runtime_context):
            self.parser = stage_parser(settings, runtime_context)
            self.enricher = enricher_for(settings, client_factory)
            self.enricher.stats.register(runtime_context)

        async def async_invoke(self, rows):
            lines, metas, records = [], [], []
            parsed = self.parser.record
            for row in rows:
                got = parsed(row)
                if isinstance(got, str):
                    self.enricher.stats.add("deadLetters")  # the operator's one count of them
                    lines.append(DEAD_MARK + got)
                else:
                    metas.append(got[0])
                    records.append(got[1])
            if records:
                lines.extend(map(rewrap, metas, await self.enricher.many(records)))
            return [join_lines(lines)]

    return ParseEnrichBatch()


def apply_enrichment(
    stream,
    settings: Settings,
    client_factory: ClientFactory,
    uids: tuple[str, str, str] = ("enrich", "enriched", "enrich-dead-letters"),
    parse_first: bool = False,
    make_flowing: Callable[..., Any] | None = None,
):
    """Wire the enrichment stage into the stream the parse step produced, looking records
    up with the clients `client_factory(settings)` makes (one per worker), from settings
    without Kafka credentials. Returns (enriched records, dead letters), both streams of
    JSON text; `uids` names the stage, its records and its dead letters. With
    `parse_first` (the batched operator only) the stream holds batches of Kafka rows and
    the stage parses them itself (`make_parse_enrich_function`); its dead letters are then
    the parse's and the lookups'."""
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream

    settings = without_secrets(settings)  # what the pickled functions below carry
    cfg = settings.enrichment
    thread_mode = settings.python.execution_mode is ExecutionMode.THREAD
    flowing = cfg.operator is EnrichmentOperator.FLOWING
    if thread_mode and not flowing:
        # The batched operator is an AsyncFunction, which PyFlink runs in process mode only;
        # its counts are gauges (flink/rows.py is_thread_mode).
        raise ConfigError(
            f"python.execution_mode: thread cannot run enrichment.operator: "
            f"{cfg.operator.value} (PyFlink runs no AsyncFunction in thread mode); "
            f"allowed in thread mode: flowing"
        )
    wait = AsyncDataStream.ordered_wait if cfg.ordered else AsyncDataStream.unordered_wait
    if flowing:
        # Its own event loop, drained at the batcher's markers (pipelines.lookups.flowing,
        # handed in by the caller: that module builds on this one).
        if make_flowing is None:
            raise ValueError("enrichment.operator: flowing needs make_flowing")
        out = stream.process(
            make_flowing(settings, client_factory, columns=thread_mode),
            output_type=Types.STRING(),
        )
    else:
        # Batched: our per-attempt timeouts bound every lookup, so no Flink timer per element.
        make = make_parse_enrich_function if parse_first else make_batch_async_function
        out = wait(
            stream,
            make(settings, client_factory),
            Time.milliseconds(0),
            cfg.elements_in_flight(),
            Types.STRING(),
        )
    stage, enriched, dead_letters = uids
    # The flowing stage keeps the name (its metrics read the same) but not the uid: a
    # savepoint of an AsyncFunction stage holds its batches in flight, which the flowing
    # stage would not read, so restoring one into it must fail, not drop them.
    out = out.name(stage).uid(f"{stage}-flowing" if flowing else stage)
    records = split_in_jvm(out, keep_marked=False).name(enriched).uid(enriched)
    dead = split_in_jvm(out, keep_marked=True).name(dead_letters).uid(dead_letters)
    return records, dead
