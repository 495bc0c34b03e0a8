"""The demo enrichment service's client: company profiles over HTTP.

One implementation of pipelines.lookups.EnrichmentClient; the only place that knows the
demo's request shapes (`GET /lookup?company=NAME`, `POST /lookup/batch {"companies": [...]}`)
and its record field (`company`). Replace it, not the stage, to call your own service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pipelines.lookups import EnrichmentFailed, PermanentLookupError, TransientLookupError
from pipelines.records.jsontext import dumps, loads
from pipelines.settings import JobSection

if TYPE_CHECKING:
    import aiohttp

    from pipelines.settings import Settings

__all__ = ["DemoHttpClient", "DemoService", "http_error"]


def http_error(status: int, url: str) -> EnrichmentFailed:
    """4xx (but 408 and 429) means this request will never succeed; anything else may."""
    cls = (
        PermanentLookupError
        if 400 <= status < 500 and status not in (408, 429)
        else TransientLookupError
    )
    return cls(f"HTTP {status} from {url}")


_JSON = {"Content-Type": "application/json"}


def _answer(body: bytes, url: str) -> Any:
    """A 200 answer that is not JSON is the service failing, as a 5xx would be."""
    try:
        return loads(body)
    except ValueError as exc:
        raise TransientLookupError(f"not JSON from {url}: {exc}") from None


class DemoService(JobSection):
    """The demo job's own section, `demo_service:`: where its lookup service answers."""

    section: ClassVar[str] = "demo_service"
    url: str = "http://127.0.0.1:8765"
    # Preflight: the service must answer here (any HTTP status counts); null: `url`.
    health_url: str | None = None


class DemoHttpClient:
    """Looks up `record["company"]`; one pooled aiohttp session per event loop, created
    on first use (on the worker's loop, not where the client was built)."""

    KEY_FIELD = "company"

    def __init__(self, url: str, max_connections: int = 100, health_url: str | None = None):
        self.base = url.rstrip("/")
        self.url = self.base + "/lookup"
        self.batch_url = self.base + "/lookup/batch"
        self.health_url = health_url
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> DemoHttpClient:
        """From the demo job's `demo_service:` section (url, health_url) and one connection
        per lookup in flight (enrichment.capacity, or max_capacity where the bound adapts)."""
        service, cfg = DemoService.of(settings), settings.enrichment
        return cls(service.url, cfg.max_capacity or cfg.capacity, service.health_url)

    async def _ensure(self) -> aiohttp.ClientSession:
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def lookup(self, record: dict) -> dict:
        import aiohttp

        session = await self._ensure()
        try:
            async with session.get(
                self.url, params={"company": str(record[self.KEY_FIELD])}
            ) as resp:
                if resp.status != 200:
                    raise http_error(resp.status, self.url)
                return _answer(await resp.read(), self.url)
        except aiohttp.ClientError as exc:
            raise TransientLookupError(f"{type(exc).__name__}: {exc}") from exc

    async def lookup_batch(self, records: list[dict]) -> list[dict | EnrichmentFailed]:
        import aiohttp

        session = await self._ensure()
        companies = [str(r[self.KEY_FIELD]) for r in records]
        try:
            # The request and the answer through orjson (pipelines.records.jsontext), not
            # aiohttp's `json`: at 5 ms the stage is bound by Python CPU, and the standard
            # library's decoder of the answers took 11% of the GIL (make profile).
            body = dumps({"companies": companies}).encode()
            async with session.post(self.batch_url, data=body, headers=_JSON) as resp:
                if resp.status != 200:
                    raise http_error(resp.status, self.batch_url)
                results = _answer(await resp.read(), self.batch_url)["results"]
        except aiohttp.ClientError as exc:
            raise TransientLookupError(f"{type(exc).__name__}: {exc}") from exc
        return [
            http_error(int(r.get("status", 500)), self.batch_url) if "error" in r else r
            for r in results
        ]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def check(self, timeout_s: float = 5.0) -> tuple[str, str] | None:
        """The service must answer (any HTTP status will do: it is listening). Otherwise
        every lookup fails and, under any policy, the job's output is not what the user
        expects; better to say so before starting."""
        import urllib.error
        import urllib.request

        url = self.health_url or self.base
        key = "demo_service.health_url" if self.health_url else "demo_service.url"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):
                return None
        except urllib.error.HTTPError:
            return None  # it answered
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, OSError) and reason.strerror:
                reason = reason.strerror
            return key, (
                f"no enrichment service answered at {url} within {timeout_s:.0f}s "
                f"({reason}); start it (the demo: `make enrichment-up`) or pass "
                f"--skip-preflight"
            )
