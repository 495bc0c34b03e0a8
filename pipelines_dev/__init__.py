"""Local stand-ins for production infrastructure: a jar-run Kafka broker, a standalone
Flink cluster from the PyFlink wheel, demo data and a demo enrichment service."""
