"""A submitted job through PyFlink's JobClient: cancel or stop it with a savepoint under a
deadline, tell a detached submission, read a Java timeout. Written for apache-flink 2.2.1's
internals (tests/unit/test_flink_compat.py)."""

from __future__ import annotations


def java_job_client(client):
    """The Java JobClient behind PyFlink's JobClient (PyFlink 2.2: `_j_job_client`)."""
    return client._j_job_client


def _get(j_future, timeout_s: float):
    """Wait on a Java CompletableFuture for at most `timeout_s` (raises on timeout)."""
    from pyflink.java_gateway import get_gateway

    unit = get_gateway().jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    return j_future.get(int(timeout_s * 1000), unit)


def cancel_job(client, timeout_s: float) -> None:
    """Cancel and wait, at most `timeout_s` (PyFlink's `cancel().result()` has no deadline)."""
    _get(java_job_client(client).cancel(), timeout_s)


def stop_with_savepoint(client, target: str, timeout_s: float) -> str:
    """Stop with a savepoint, at most `timeout_s`. PyFlink 2.2's JobClient.stop_with_savepoint
    calls a Java signature that no longer exists (it lacks the SavepointFormatType), so
    this calls the Java client directly."""
    from pyflink.java_gateway import get_gateway

    fmt = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    return str(_get(java_job_client(client).stopWithSavepoint(False, target, fmt), timeout_s))


def is_detached(result) -> bool:
    """Whether `env.execute` returned at submission (`flink run --detached`): Flink then
    hands back a DetachedJobExecutionResult, which has an id but no outcome."""
    return not result._j_job_execution_result.isJobExecutionResult()


def is_java_timeout(exc: BaseException) -> bool:
    return "java.util.concurrent.TimeoutException" in str(exc)
