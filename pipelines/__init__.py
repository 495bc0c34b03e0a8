"""PyFlink pipeline template: Kafka -> slow async enrichment -> Kafka, exactly once.

A job imports `pipelines.api` (the declaration, the stages, settings, the lookup contract);
its tests import `pipelines.testing`. docs/api.md is their page; tests/unit/public_api.txt
pins them. The Beam pipeline's transforms are `pipelines.beam.transforms`. Everything else
serves the commands and may change.
"""

import logging as _logging

# Beam (inside PyFlink) warns "Failed to import GCSFileSystem" whenever a `google.cloud`
# namespace exists without google-cloud-storage, as with confluent-kafka's schema-registry
# extras (which the benchmark's peer brings in). No job here reads GCS: keep it quiet.
_logging.getLogger("apache_beam.io.filesystems").setLevel(_logging.ERROR)
