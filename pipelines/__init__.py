"""PyFlink pipeline template: Kafka -> slow async enrichment -> Kafka, exactly once."""

import logging as _logging

# Beam (inside PyFlink) warns "Failed to import GCSFileSystem" whenever a `google.cloud`
# namespace exists without google-cloud-storage, as with confluent-kafka's schema-registry
# extras (which the benchmark's peer brings in). No job here reads GCS: keep it quiet.
_logging.getLogger("apache_beam.io.filesystems").setLevel(_logging.ERROR)
