"""What an enrichment stage needs from a lookup service, and nothing more.

A client answers "look this record up" (and, if the service can, "look these records up"
in one round trip). The stage (pipelines/lookups/enrichment.py) owns everything around it:
batching, concurrency, per-attempt timeouts, retries with backoff, the failure policy,
dead letters and metrics. So a client is small, and a test can replace one with a dict.

The contract:

- `async lookup(record) -> dict`: what to add to the record (it becomes the record's
  `enrichment` field). Required.
- `async lookup_batch(records) -> list[dict | EnrichmentFailed]`: optional. One result per
  record, in order; a failed record's entry is the exception. When a client has it and
  `enrichment.coalesce` is true, the stage gathers the lookups that start together (a
  batch's) into one call; each record still has its own timeout and retries.
- `async close()`: release connections. Required (may do nothing).
- `check(timeout_s) -> tuple[str, str] | None`: optional, for preflight: None when the
  service answers, else (the setting to blame, why it does not).

What to raise: `TransientLookupError` when trying again may help (the service is slow,
down, overloaded: the stage retries, then applies `enrichment.on_failure`);
`PermanentLookupError` when it cannot (the service says this record cannot be enriched:
dead letters at once, whatever the policy). `asyncio.TimeoutError` and `OSError` count as
transient. Anything else is treated as a bug: that record goes to dead letters and
`errors.max_unexpected_in_a_row` such records in a row fail the job.

A client is created by a factory `(settings) -> client` that the job passes to the stage;
the factory runs on the Flink worker, so it must be importable there (a module-level
function of the job, say), and the client is used from one asyncio event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pipelines.settings import Settings

__all__ = [
    "BatchEnrichmentClient",
    "ClientFactory",
    "EnrichmentClient",
    "EnrichmentFailed",
    "PermanentLookupError",
    "TransientLookupError",
]


class EnrichmentFailed(Exception):
    """A lookup failed: transient unless it is a PermanentLookupError. Raised out of the
    stage under `on_failure: fail` once retries are exhausted."""


class TransientLookupError(EnrichmentFailed):
    """Worth retrying: the service is slow, down or overloaded."""


class PermanentLookupError(EnrichmentFailed):
    """Retrying cannot help: the service says this record cannot be enriched."""


@runtime_checkable
class EnrichmentClient(Protocol):
    """The required part of the contract (see the module docstring for the optional one)."""

    async def lookup(self, record: dict) -> dict: ...

    async def close(self) -> None: ...


@runtime_checkable
class BatchEnrichmentClient(EnrichmentClient, Protocol):
    """A client that also looks records up in one round trip (`enrichment.coalesce`)."""

    async def lookup_batch(self, records: list[dict]) -> list[dict | EnrichmentFailed]: ...


ClientFactory = Callable[["Settings"], EnrichmentClient]
"""`factory(settings) -> EnrichmentClient`, called once per worker when the stage opens."""


def has_batch_lookup(client: object) -> bool:
    return callable(getattr(client, "lookup_batch", None))
