"""The Kafka side: settings -> KafkaSource/KafkaSink, the CLI's Kafka clients, committed offsets, the checks made against a broker before a job starts."""
