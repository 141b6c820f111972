"""kqp.protocol: the sans-io Kafka wire codec.

Bytes in, frames out, and back; no sockets, no asyncio, no clock (a test checks the imports).
Built on kafka-python's copy of Apache Kafka's JSON message schemas: per-API knowledge is derived
from them into tables at import, never hand-written.

Decode what must be decoded, pass the rest through: every frame's header is parsed with ``struct``
at fixed offsets; bodies are touched only for the few fields kqp reads or rewrites, reached by a
schema-driven skip walker that reads lengths and counts and never record data. The modules, one
line each, are listed in protocol/README.md.
"""
