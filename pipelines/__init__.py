"""PyFlink pipeline template: Kafka -> slow async enrichment -> Kafka, exactly once.

What a job you write may import and rely on (each module's `__all__`, pinned by
tests/unit/test_public_api.py; a change to it is a change of the template's API):

- `pipelines.stages`: the stage builders a job's `build` composes (and the stream shapes);
- `pipelines.lookups`: the enrichment client contract and the errors a client raises;
  `pipelines.lookups.http_demo` is one client, to copy or replace;
- `pipelines.settings`: the typed settings a job reads;
- `pipelines.job`: a job's one declaration (`Job`: its build and its own sections, and
  `job.main()`, what a job module runs as `__main__`);
- `pipelines.testing`: a job's `build` over records from a list, no Kafka;
- `pipelines.beam.transforms`: the Beam pipeline's composite transforms.

Everything else serves the CLI and may change.
"""

import logging as _logging

# Beam (inside PyFlink) warns "Failed to import GCSFileSystem" whenever a `google.cloud`
# namespace exists without google-cloud-storage, as with confluent-kafka's schema-registry
# extras (which the benchmark's peer brings in). No job here reads GCS: keep it quiet.
_logging.getLogger("apache_beam.io.filesystems").setLevel(_logging.ERROR)
