"""The enrich job as an Apache Beam pipeline, for teams that standardise on Beam.

Same `conf/` files and layers as the PyFlink jobs (plus a `beam:` section), same parse
and enrichment logic, same lookup clients (pipelines.lookups). Runs on Beam's Prism
runner (streaming or bounded) or the DirectRunner (bounded). Streaming, it reads and
writes Kafka in Python (kafka_io); bounded, with KafkaIO's Java side in a local expansion
service and Java worker. Its guarantees differ from the PyFlink job's (at least once, no
transactional sink): docs/beam.md has both side by side.

A Beam job module here holds `USES`, `SECTIONS` (its own settings sections),
`lookup_client(settings)` and `build(pipeline, settings, expansion_service)` (None in
streaming); `pipelines beam run NAME` runs it.
"""

from __future__ import annotations

from pathlib import Path

BEAM_DIR = Path(__file__).resolve().parent
MACHINERY = {"__init__", "run", "java", "kafka_io", "transforms"}


def names(beam_dir: Path = BEAM_DIR) -> list[str]:
    """The Beam jobs in `beam_dir` (this package by default): its modules but the machinery."""
    return sorted(p.stem for p in beam_dir.glob("*.py") if p.stem not in MACHINERY)
