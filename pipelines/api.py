"""What a job imports, from one place (docs/api.md is its page):

    from pipelines.api import Job, Settings, stages

- `Job`: the job's one declaration, `job = Job(build, sections=(...))`; `JobError` when it
  is declared wrongly.
- `stages`: the stages `build` composes (`stages.kafka_source`, `stages.parse_and_enrich`,
  `stages.kafka_sink`, ...), the stream shapes (`Rows`, `Records`, `Batches`) and
  `StageError`.
- `Settings`, `JobSection`, `FieldType`, `ConfigError`: the typed settings a job reads,
  its own sections, a field type for `stages.parse(extra_required=...)`, a config error.
- `EnrichmentClient`, `BatchEnrichmentClient`: the lookup contract a job's
  `lookup_client(settings)` returns; `PermanentLookupError`, `TransientLookupError` and
  `EnrichmentFailed`: what a client raises or answers when a record cannot be enriched.

A job's tests import `pipelines.testing` (run a job over records from a list), which a job
itself never imports. Everything else in the package serves the commands and may change.
"""

from pipelines import stages
from pipelines.lookups import (
    BatchEnrichmentClient,
    EnrichmentClient,
    EnrichmentFailed,
    PermanentLookupError,
    TransientLookupError,
)
from pipelines.running.job import Job, JobError
from pipelines.settings import ConfigError, FieldType, JobSection, Settings

__all__ = [
    "BatchEnrichmentClient",
    "ConfigError",
    "EnrichmentClient",
    "EnrichmentFailed",
    "FieldType",
    "Job",
    "JobError",
    "JobSection",
    "PermanentLookupError",
    "Settings",
    "TransientLookupError",
    "stages",
]
