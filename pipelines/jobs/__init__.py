"""The jobs, one module each: `pipelines/jobs/<name>.py` declares `job = Job(...)` (from
pipelines.api) and is listed by pipelines.running.registry. Nothing else lives here."""
