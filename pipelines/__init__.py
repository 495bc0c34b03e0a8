"""PyFlink pipeline template: Kafka -> slow async enrichment -> Kafka, exactly once."""
