"""What a job needs on a machine that runs it: pinned jars (fetched with mvn, sha256-checked) and the package `pipelines package` writes."""
