"""A mini-cluster of this process's gateway JVM: started for jobs submitted one after another,
and the REST address one binds. Written for apache-flink 2.2.1's internals
(tests/unit/test_flink_compat.py)."""

from __future__ import annotations

from pipelines.flink.jobclient import java_job_client


def mini_cluster_rest_url(client) -> str:
    """The REST address the mini-cluster bound, read from the job client.

    The mini-cluster binds port 0 and the kernel picks: choosing a free port beforehand and
    handing it over races with every other bind in the JVM. PyFlink
    has no accessor for the address, so this reads MiniClusterJobClient's cluster (Flink 2.2).
    """
    j_client = java_job_client(client)
    field = j_client.getClass().getDeclaredField("miniCluster")
    field.setAccessible(True)
    return str(field.get(j_client).getRestAddress().get().toString()).rstrip("/")


def start_mini_cluster(config: dict[str, str], slots: int):
    """A MiniCluster started in this process's gateway JVM, for jobs submitted to it one
    after another; `close()` it (the JVM ending ends it too).

    PyFlink's local target starts a new MiniCluster for every execute and shuts it down
    after: a second of each `pipelines.testing.run`. Flink 2.2:
    `org.apache.flink.runtime.minicluster.MiniCluster` and its configuration builder.
    """
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_config = jvm.org.apache.flink.configuration.Configuration()
    for key, value in config.items():
        j_config.setString(key, value)
    builder = jvm.org.apache.flink.runtime.minicluster.MiniClusterConfiguration.Builder()
    j_cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(
        builder.setConfiguration(j_config)
        .setNumTaskManagers(1)
        .setNumSlotsPerTaskManager(slots)
        .build()
    )
    j_cluster.start()
    return j_cluster


def mini_cluster_port(j_cluster) -> int:
    """The REST port a started MiniCluster bound (it binds port 0 and the kernel picks)."""
    return int(j_cluster.getRestAddress().get().getPort())
