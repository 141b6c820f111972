"""kqp.spark: a Kafka sink for PySpark that needs no jars (Spark 4 Python Data Source)."""
