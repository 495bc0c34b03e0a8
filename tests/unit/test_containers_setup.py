"""Pure parts of the container set-up: the Debian mirror read from apt's own sources, and the
broker settings the Kafka container gets (the apache/kafka image's variable names)."""

from __future__ import annotations

import pytest

from pipelines_dev.containers import ContainerBroker, DockerError, cluster_id, debian_mirror
from pipelines_dev.kafka_broker import SINGLE_NODE

pytestmark = pytest.mark.unit


def test_mirror_from_a_deb822_sources_file(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n"
        "URIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
        "\n"
        "Types: deb\n"
        "# a comment: with a colon\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_a_one_line_sources_list(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"


def test_no_mirror_names_the_place_and_the_way_out(tmp_path):
    with pytest.raises(DockerError) as caught:
        debian_mirror(tmp_path)
    assert str(caught.value) == (
        f"no Debian bookworm mirror in {tmp_path}/sources.list(.d); debootstrap needs one "
        f"(or set PIPELINES_BASE_IMAGE to an image with Java 17 and Python 3.11)"
    )


def test_container_broker_environment_follows_the_apache_kafka_image_names():
    env = ContainerBroker(port=25001).environment()
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "HOST://127.0.0.1:25001,NET://kafka:9094"
    assert env["KAFKA_LISTENERS"].startswith("HOST://0.0.0.0:25001,")
    # What the tests depend on, written out (not derived from the code's own table): one
    # replica for the internal topics (else transactions and group commits hang on one
    # node), no auto-created topics, and no time-based retention (tests write records with
    # timestamps years old; the retention check deleted them mid-test).
    one_node = {
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_LOG_RETENTION_MS": "-1",
    }
    assert {k: env.get(k) for k in one_node} == one_node
    # The jar broker gets the same settings under Kafka's own names.
    assert {"KAFKA_" + k.upper().replace(".", "_"): v for k, v in SINGLE_NODE.items()} == one_node
    assert len(env["CLUSTER_ID"]) == 22


def test_cluster_ids_are_kraft_shaped_and_fresh():
    ids = {cluster_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 22 and "=" not in i for i in ids)


def test_a_cluster_id_never_starts_with_a_dash():
    """kafka-storage reads `--cluster-id -x...` as an option and the broker container exits;
    a random base64 id starts with a dash once in 64."""
    from pipelines_dev.containers import cluster_id

    ids = [cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids)
