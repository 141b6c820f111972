"""The per-API handlers of the connection core, one module per API family, and their registry.

Each handler is one API family's request side and response side (`kqp.proxy.connection.exchange`
defines the contract), in the manner of Kroxylicious' filters: what kqp reads, rewrites, answers or
charges for that family lives in its module and nowhere else. The registry (`registry.py`) maps api
keys to handlers; the server builds it once with the policies the handlers consult, and the core's
one dispatcher looks each request's handler up there. An API with no handler of its own goes
through the default one, on its header alone.

* `produce.py`: Produce (acks, the bytes and records it carries);
* `fetch.py`: Fetch (max_bytes capped to the quota, the response's bytes and records, `fetch_throttle`);
* `api_versions.py`: ApiVersions, answered by kqp;
* `mutations.py`: Metadata, CreateTopics, DeleteTopics, CreatePartitions through the KIP-599 gate;
* `client_quotas.py`: DescribeClientQuotas and AlterClientQuotas, answered by kqp (`admin.manage_quotas`);
* `sasl.py`: SaslHandshake and SaslAuthenticate, whatever `sasl.mode` says.
"""
