"""The Flink side: settings -> the execution environment, watermarks, checkpoints; a
JobManager's REST API; the wheel's Flink distribution; and, one module per concern, each
use of PyFlink's private API (gateway, minicluster, jobclient, workers, streams, rows),
written for this version and tested against its wheel (tests/unit/test_flink_compat.py)."""

FLINK_VERSION = "2.2.1"
