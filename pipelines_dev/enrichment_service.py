"""A slow external lookup service: the stand-in for the reports' company-registry calls.

A real HTTP server (aiohttp) with configurable latency, jitter and failure rate, and an
admin endpoint to change them while a job runs (outage tests). Run it in the foreground
with `python -m pipelines_dev.enrichment_service`, or in the background with
`pipelines-dev enrichment up`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.host.paths import local_state
from pipelines.running.processes import PidFile, end_groups, group_alive, wait_started
from pipelines.settings import parse_duration_ms

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("PIPELINES_ENRICHMENT_DIR", local_state("enrichment")))
DEFAULT_PORT = int(os.environ.get("PIPELINES_ENRICHMENT_PORT", "8765"))
COUNTRIES = ["DE", "FR", "CN", "US", "BR", "JP", "IN", "NG"]


class ServiceError(Exception):
    """The service could not be started or reached."""


@dataclass
class Behaviour:
    latency_ms: float = 50.0
    jitter_ms: float = 0.0
    failure_rate: float = 0.0
    down: bool = False  # answer 503 to everything but /health and /admin
    unknown: list = field(default_factory=list)  # companies answered with 404 (permanent)
    requests: int = 0
    failures: int = 0
    started: float = field(default_factory=time.time)


def company_profile(company: str) -> dict:
    """Deterministic, so tests can assert the exact enrichment a record gets."""
    digest = hashlib.sha256(company.encode()).digest()
    return {
        "company": company,
        "registry_id": f"REG-{int.from_bytes(digest[:4], 'big') % 1_000_000:06d}",
        "country": COUNTRIES[digest[4] % len(COUNTRIES)],
        "employees": 10 + int.from_bytes(digest[5:7], "big") % 5000,
    }


def admin_value(key: str, current, value):
    """A value for /admin, checked against the type of the setting it replaces: JSON
    booleans only for flags (`bool("false")` is True), finite numbers for the others."""
    if isinstance(current, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key}: {value!r} is not a list of strings")
        return value
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{key}: {value!r} is not a JSON boolean (true or false)")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key}: {value!r} is not a number")
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise ValueError(f"{key}: {value!r} is not a finite number >= 0")
    if key == "failure_rate" and value > 1:
        raise ValueError(f"{key}: {value!r} is not between 0 and 1")
    return type(current)(value)


def make_app(behaviour: Behaviour):
    from aiohttp import web

    async def lookup(request: web.Request) -> web.Response:
        behaviour.requests += 1
        company = request.query.get("company", "")
        delay = behaviour.latency_ms + (random.uniform(-1, 1) * behaviour.jitter_ms)
        await asyncio.sleep(max(delay, 0) / 1000)
        if behaviour.down or (behaviour.failure_rate and random.random() < behaviour.failure_rate):
            behaviour.failures += 1
            return web.json_response({"error": "registry unavailable"}, status=503)
        if not company:
            return web.json_response({"error": "company is required"}, status=400)
        if company in behaviour.unknown:
            return web.json_response({"error": "no such company"}, status=404)
        return web.json_response(company_profile(company))

    async def lookup_batch(request: web.Request) -> web.Response:
        """POST {"companies": [...]}: one round trip for many lookups, one latency for all.
        Each item fails on its own with the failure rate, as single lookups do."""
        body = await request.json()
        companies = body.get("companies")
        if not isinstance(companies, list):
            return web.json_response({"error": "companies must be a list"}, status=400)
        behaviour.requests += 1
        delay = behaviour.latency_ms + (random.uniform(-1, 1) * behaviour.jitter_ms)
        await asyncio.sleep(max(delay, 0) / 1000)
        if behaviour.down:
            behaviour.failures += 1
            return web.json_response({"error": "registry unavailable"}, status=503)
        results = []
        for company in companies:
            if behaviour.failure_rate and random.random() < behaviour.failure_rate:
                behaviour.failures += 1
                results.append({"error": "registry unavailable", "status": 503})
            elif company in behaviour.unknown:
                results.append({"error": "no such company", "status": 404})
            else:
                results.append(company_profile(str(company)))
        return web.json_response({"results": results})

    async def health(_request):
        return web.json_response({"ok": True})

    async def stats(_request):
        return web.json_response(
            {
                "requests": behaviour.requests,
                "failures": behaviour.failures,
                "latency_ms": behaviour.latency_ms,
                "down": behaviour.down,
                "failure_rate": behaviour.failure_rate,
            }
        )

    async def admin(request: web.Request):
        try:
            body = await request.json()
            changes = {
                key: admin_value(key, getattr(behaviour, key), body[key])
                for key in ("latency_ms", "jitter_ms", "failure_rate", "down", "unknown")
                if key in body
            }
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        for key, value in changes.items():
            setattr(behaviour, key, value)
        return await stats(request)

    app = web.Application()
    app.add_routes(
        [
            web.get("/lookup", lookup),
            web.post("/lookup/batch", lookup_batch),
            web.get("/health", health),
            web.get("/stats", stats),
            web.post("/admin", admin),
        ]
    )
    return app


def serve(port: int, behaviour: Behaviour, host: str = "127.0.0.1") -> None:
    from aiohttp import web

    web.run_app(
        make_app(behaviour), host=host, port=port, print=None, access_log=None, backlog=4096
    )


# ------------------------------------------------------------------ background control


@dataclass(frozen=True)
class Service:
    port: int = DEFAULT_PORT
    state_dir: Path = STATE_DIR

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> PidFile:
        # The module's name without its package: a service started before the package
        # moved (pipelines.devtools) is still recognised, and stopped, by `down`.
        return PidFile(
            self.state_dir / f"service-{self.port}.pid", "enrichment_service", "enrich  "
        )

    def _get(self, path: str, timeout: float = 1.0) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as resp:
                return json.load(resp)
        except Exception:  # noqa: BLE001 - not up
            return None

    def healthy(self) -> bool:
        return self._get("/health") is not None

    def stats(self) -> dict | None:
        return self._get("/stats")

    def configure(self, **behaviour) -> dict:
        req = urllib.request.Request(
            f"{self.url}/admin",
            data=json.dumps(behaviour).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.load(resp)

    def up(
        self,
        latency_ms: float = 50,
        failure_rate: float = 0.0,
        jitter_ms: float = 0,
        wait_s: float = 20,
    ) -> None:
        if self.healthy():
            self.configure(
                latency_ms=latency_ms, failure_rate=failure_rate, jitter_ms=jitter_ms, down=False
            )
            log.info(f"enrich   running at {self.url} (latency {latency_ms:g} ms)")
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / f"service-{self.port}.log", "ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pipelines_dev.enrichment_service",
                    "--port",
                    str(self.port),
                    "--latency",
                    f"{int(latency_ms)}ms",
                    "--jitter",
                    f"{int(jitter_ms)}ms",
                    "--failure-rate",
                    str(failure_rate),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write(proc.pid)
        if wait_started(proc, self.healthy, wait_s):
            log.info(f"enrich   started at {self.url} (latency {latency_ms:g} ms, pid {proc.pid})")
            return
        if proc.returncode is not None:
            raise ServiceError(
                f"the enrichment service exited with {proc.returncode}; see "
                f"{self.state_dir / f'service-{self.port}.log'}"
            )
        raise ServiceError(f"the enrichment service did not answer at {self.url} in {wait_s:.0f}s")

    def down(self, grace_s: float = 10.0) -> None:
        """End the service's process group: SIGTERM, then SIGKILL after `grace_s` (a
        service that is stopped or stuck answers no health check, but still runs). The
        pid file goes only once the group has ended."""
        pid = self.pid_file.live()
        if pid is None:
            log.info("enrich   not running")
            return
        end_groups([pid], grace_s)  # started with start_new_session: its group is its pid
        if group_alive(pid):
            raise ServiceError(f"the enrichment service (pid {pid}) outlived SIGKILL")
        self.pid_file.remove()
        log.info("enrich   stopped")

    def status(self) -> str:
        stats = self.stats()
        if stats is None:
            return f"enrich   not running (expected at {self.url})"
        return (
            f"enrich   running at {self.url}: {stats['requests']} requests, "
            f"{stats['failures']} failed, latency {stats['latency_ms']:g} ms"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (0.0.0.0 inside a container)"
    )
    parser.add_argument("--latency", default="50ms")
    parser.add_argument("--jitter", default="0ms")
    parser.add_argument("--failure-rate", type=float, default=0.0)
    args = parser.parse_args(argv)
    serve(
        args.port,
        Behaviour(
            latency_ms=parse_duration_ms(args.latency),
            jitter_ms=parse_duration_ms(args.jitter),
            failure_rate=args.failure_rate,
        ),
        host=args.host,
    )


if __name__ == "__main__":
    main()
