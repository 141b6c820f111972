"""Kafka's measures of use: the sampled rate, the token bucket, one key's sensor, and the throttle a request gets."""
