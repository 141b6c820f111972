"""kqp.protocol: the sans-io Kafka wire codec.

Bytes in, frames out, and back; no sockets, no asyncio, no clock (a test checks the imports).
Built on kafka-python's copy of Apache Kafka's JSON message schemas: per-API knowledge is derived
from them into tables at import, never hand-written.

Decode what must be decoded, pass the rest through: every frame's header is parsed with ``struct``
at fixed offsets; bodies are touched only for the few fields kqp reads or rewrites, reached by a
schema-driven skip walker that reads lengths and counts and never record data.

Modules:

* ``errors``: ProtocolError and subclasses (a peer's bytes kqp cannot accept);
* ``frames``: FrameDecoder, splitting a byte stream into size-prefixed frames, zero-copy;
* ``parts``: SplitFrame, a frame read as the parts it arrived in, copying only what a cut splits;
* ``apis``: per-API tables (decodable versions, header versions, KIP-219 client throttling);
* ``kafka39``: the few facts Kafka 3.9's definitions hold that kafka-python's (Kafka 4's) no longer do;
* ``advertised``: which versions kqp advertises, and which requests go through on their header alone;
* ``headers``: request/response header parsing and encoding;
* ``walker``: the skip walker, compiled per message and version from kafka-python's schemas;
* ``throttle``: where ``throttle_time_ms`` sits, reading and raising it in place;
* ``addresses``: finding and rewriting every broker endpoint a client can see;
* ``api_versions``: kqp's own ApiVersions answer, and the probe that learns an upstream's ranges;
* ``messages``: kqp's own requests to upstreams and small decodes;
* ``produce``, ``fetch``, ``records``, ``mutations``: body readers for quota accounting.
"""
