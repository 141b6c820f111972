"""Upstream Kafka implementations the end-to-end tests run kqp against (see launch.py)."""
