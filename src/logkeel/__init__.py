"""logkeel: a Kafka-compatible, replicated log broker."""

__version__ = "0.1.0"
