"""Reading Kafka's own `kafka-transactions list` output, as the chaos trials (the open
transaction whose coordinator to kill) and the transaction-naming test (the ids the broker
keeps) both do (pipelines_dev.kafka_broker)."""

from __future__ import annotations

import pytest

from pipelines_dev.kafka_broker import ListedTransaction, listed_transactions

pytestmark = pytest.mark.unit

# The tool's output, tabs and padding as Kafka 4.1 prints it, with a warning line above.
OUTPUT = (
    "[2026-12-06 05:20:01] WARN some client warning (org.apache.kafka.clients.NetworkClient)\n"
    "TransactionalId                                       \tCoordinator\tProducerId\tTransactionState\t\n"
    "bench-enrich-500ms-project-2-87586c-0-25              \t1          \t1566      \tCompleteCommit  \t\n"
    "enrich-dlq-0-6                                        \t3          \t980       \tOngoing         \t\n"
    "enrich-0-7                                            \t2          \t981       \tEmpty           \t\n"
)


def test_every_row_is_read_and_the_header_and_warnings_are_not():
    assert listed_transactions(OUTPUT) == [
        ListedTransaction("bench-enrich-500ms-project-2-87586c-0-25", 1, 1566, "CompleteCommit"),
        ListedTransaction("enrich-dlq-0-6", 3, 980, "Ongoing"),
        ListedTransaction("enrich-0-7", 2, 981, "Empty"),
    ]


def test_no_transactions_is_no_rows():
    assert listed_transactions(OUTPUT.splitlines()[1] + "\n") == []
