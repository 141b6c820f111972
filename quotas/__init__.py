"""kqp.quotas: pure quota accounting (no sockets, no asyncio, no clock reads).

Entity resolution (`entities`), Kafka's sampled rate (`sampled_rate`), KIP-599's token bucket
(`token_bucket`), throttle arithmetic (`throttle`), the delay queue's ordering (`delay_queue`)
and the engine that ties them together (`manager`). Every function that depends on time takes
`now` (seconds, monotonic) as an argument. Submodules are imported directly, e.g.
``from kqp.quotas.manager import QuotaManager``; this package module stays empty so that importing
`kqp.quotas.model` (as `kqp.config` does) pulls in nothing else.
"""
