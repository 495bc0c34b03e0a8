"""The Flink side: settings -> the execution environment, watermarks, checkpoints; PyFlink's private API in one place; a JobManager's REST API; the wheel's Flink distribution."""
