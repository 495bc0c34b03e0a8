"""The async enrichment stage: slow lookups that never stall checkpoints or offset commits.

A synchronous lookup of L seconds caps a slot at 1/L records/s and, because PyFlink
flushes its bundle before every checkpoint barrier, holds every checkpoint (and so every
offset commit) hostage. Async I/O keeps up to `capacity` lookups in flight; each record's
fate on timeout or error is decided here, by `enrichment.on_failure`:

- retries with backoff first (`retries`, `backoff`), each attempt bounded by `timeout`;
- then `mark-missing`: emit the record with `enrichment: null` and the reason, or
- `fail`: raise, so the job fails and the restart strategy takes over.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Protocol

from pipelines.settings import EnrichmentOperator, EnrichmentSettings, OnFailure


class EnrichmentFailed(Exception):
    """Raised under `on_failure: fail` once retries are exhausted."""


class EnrichmentClient(Protocol):
    """What the stage needs from a lookup service. Swap in your own."""

    async def lookup(self, record: dict) -> dict: ...

    async def close(self) -> None: ...


class HttpEnrichmentClient:
    """GET {url}/lookup?company=... with one pooled aiohttp session per event loop."""

    def __init__(self, url: str, timeout_ms: int, max_connections: int):
        self.url = url.rstrip("/") + "/lookup"
        self.timeout_ms = timeout_ms
        self.max_connections = max_connections
        self._session = None

    async def _ensure(self):
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def lookup(self, record: dict) -> dict:
        session = await self._ensure()
        async with session.get(self.url, params={"company": str(record.get("company", ""))}) as resp:
            if resp.status != 200:
                raise EnrichmentFailed(f"HTTP {resp.status} from {self.url}")
            return await resp.json()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class CoalescingHttpEnrichmentClient(HttpEnrichmentClient):
    """Lookups started in the same event-loop turn share one POST {url}/lookup/batch.

    A batch of records is looked up concurrently, so all of its lookups land in one turn:
    one HTTP round trip instead of one per record. Each record still awaits its own
    result, with its own timeout and retries (a retry joins the next round trip).
    """

    def __init__(self, url: str, timeout_ms: int, max_connections: int):
        super().__init__(url, timeout_ms, max_connections)
        self.batch_url = url.rstrip("/") + "/lookup/batch"
        self._pending: list[tuple[str, asyncio.Future]] = []

    async def lookup(self, record: dict) -> dict:
        future = asyncio.get_running_loop().create_future()
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append((str(record.get("company", "")), future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        asyncio.ensure_future(self._send(pending))

    async def _send(self, pending: list[tuple[str, asyncio.Future]]) -> None:
        try:
            session = await self._ensure()
            async with session.post(self.batch_url,
                                    json={"companies": [c for c, _ in pending]}) as resp:
                if resp.status != 200:
                    raise EnrichmentFailed(f"HTTP {resp.status} from {self.batch_url}")
                results = (await resp.json())["results"]
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else
                                         EnrichmentFailed(repr(exc)))
            return
        for (_, future), result in zip(pending, results):
            if future.done():  # timed out already
                continue
            if "error" in result:
                future.set_exception(EnrichmentFailed(
                    f"HTTP {result.get('status', 500)} from {self.batch_url}"))
            else:
                future.set_result(result)


def make_client(cfg: EnrichmentSettings) -> HttpEnrichmentClient:
    cls = CoalescingHttpEnrichmentClient if cfg.coalesce else HttpEnrichmentClient
    return cls(cfg.url, cfg.timeout, cfg.capacity)


async def enrich_record(client: EnrichmentClient, record: dict, cfg: EnrichmentSettings) -> dict:
    """One record through lookup, retries and the failure policy; returns the output record."""
    out = await _enrich(client, record, cfg)
    if cfg.trace_timing and "_timing" in out:
        out["_timing"] = {**out["_timing"], "out": time.time() * 1000}
    return out


async def _enrich(client: EnrichmentClient, record: dict, cfg: EnrichmentSettings) -> dict:
    reason = "not attempted"
    attempts = cfg.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            async with asyncio.timeout(cfg.timeout / 1000):
                profile = await client.lookup(record)
            return {**record, "enrichment": profile}
        except asyncio.TimeoutError:
            reason = f"timeout after {cfg.timeout} ms"
        except EnrichmentFailed as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - connection refused, DNS, bad JSON...
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if attempt < attempts:
            await asyncio.sleep(cfg.backoff * (2 ** (attempt - 1)) / 1000)
    message = f"{reason} ({attempts} attempt{'s' if attempts > 1 else ''})"
    if cfg.on_failure is OnFailure.FAIL:
        raise EnrichmentFailed(f"enrichment of record {record.get('id')!r} failed: {message}")
    return {**record, "enrichment": None, "enrichment_error": message}


def worst_case_ms(cfg: EnrichmentSettings) -> int:
    """How long one record can take through all attempts and backoffs."""
    backoffs = sum(cfg.backoff * (2 ** i) for i in range(cfg.retries))
    return (cfg.retries + 1) * cfg.timeout + backoffs


def make_async_function(cfg: EnrichmentSettings):
    """PyFlink AsyncFunction applying `enrich_record` to JSON strings."""
    from pyflink.datastream.functions import AsyncFunction

    class Enrich(AsyncFunction):
        def __init__(self):
            self.client: HttpEnrichmentClient | None = None

        def open(self, runtime_context):
            # The session is created lazily on the operator's event-loop thread.
            self.client = HttpEnrichmentClient(cfg.url, cfg.timeout, cfg.capacity)

        async def async_invoke(self, value: str):
            record = json.loads(value)
            return [json.dumps(await enrich_record(self.client, record, cfg), sort_keys=True)]

        def timeout(self, value: str):
            # Only reached if enrich_record overruns its own bound: treat like any failure.
            if cfg.on_failure is OnFailure.FAIL:
                raise EnrichmentFailed(f"enrichment overran {worst_case_ms(cfg)} ms")
            record = json.loads(value)
            return [json.dumps({**record, "enrichment": None,
                                "enrichment_error": "overall timeout"}, sort_keys=True)]

        def close(self):
            self.client = None

    return Enrich()


def make_batch_async_function(cfg: EnrichmentSettings):
    """An AsyncFunction over JSON lists of records: one Python element per batch, every
    record of the batch looked up concurrently, each with its own timeout and retries."""
    from pyflink.datastream.functions import AsyncFunction

    class EnrichBatch(AsyncFunction):
        def __init__(self):
            self.client: HttpEnrichmentClient | None = None

        def open(self, runtime_context):
            self.client = make_client(cfg)

        async def async_invoke(self, value: str):
            records = json.loads(value)
            results = await asyncio.gather(*(enrich_record(self.client, r, cfg) for r in records))
            return [json.dumps(r, sort_keys=True) for r in results]

        def close(self):
            self.client = None

    return EnrichBatch()


def make_sync_function(cfg: EnrichmentSettings):
    """A blocking lookup per record: the reports' way. For comparison only."""
    from pyflink.datastream.functions import MapFunction

    class EnrichSync(MapFunction):
        def open(self, runtime_context):
            self.loop = asyncio.new_event_loop()
            self.client = HttpEnrichmentClient(cfg.url, cfg.timeout, 1)

        def map(self, value: str) -> str:
            record = json.loads(value)
            return json.dumps(self.loop.run_until_complete(enrich_record(self.client, record, cfg)),
                              sort_keys=True)

        def close(self):
            self.loop.run_until_complete(self.client.close())
            self.loop.close()

    return EnrichSync()


def batch_records(stream, cfg: EnrichmentSettings):
    """Insert the Java RecordBatcher (jars/src): rows -> lists of up to batch_size rows,
    flushed after batch_delay and before every checkpoint barrier."""
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    batcher = get_gateway().jvm.pipelines.flink.RecordBatcher
    j_stream = stream._j_data_stream
    j_batched = j_stream.transform("batch", batcher.outputType(j_stream.getType()),
                                   batcher(cfg.effective_batch_size(), cfg.batch_delay))
    return DataStream(j_batched)


def apply_enrichment(stream, cfg: EnrichmentSettings):
    """Wire the enrichment stage into the stream the parse step produced."""
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream

    wait = AsyncDataStream.ordered_wait if cfg.ordered else AsyncDataStream.unordered_wait
    if cfg.operator is EnrichmentOperator.SYNC:
        return stream.map(make_sync_function(cfg), output_type=Types.STRING())
    if cfg.operator is EnrichmentOperator.ASYNC:
        # As PyFlink documents it: one element per record, Flink's own timeout per record
        # (each starts a threading.Timer), `timeout()` applying the failure policy.
        overall = Time.milliseconds(worst_case_ms(cfg) + 5_000)
        return wait(stream, make_async_function(cfg), overall, cfg.capacity, Types.STRING())
    # Batched: our per-attempt timeouts bound every lookup, so no Flink timer per element.
    return wait(stream, make_batch_async_function(cfg), Time.milliseconds(0),
                cfg.elements_in_flight(), Types.STRING())
