"""The per-API handlers of the connection core, one module per API family, and their registry.

Each handler reads one API's request and returns a `Plan` (`kqp.proxy.connection.plans`), in the
manner of Kroxylicious' filters: what kqp reads, rewrites, answers or charges for that API lives in
its module and nowhere else. The registry (`registry.py`) maps api keys to handlers, the one place
that knows which API is which; an API with no handler of its own passes through on its header alone.

* `produce.py`: Produce (acks, the bytes and records it carries);
* `fetch.py`: Fetch and ShareFetch (max_bytes capped to the quota, the response's bytes and records,
  `fetch_throttle`);
* `api_versions.py`: ApiVersions, answered by kqp;
* `mutations.py`: Metadata, CreateTopics, DeleteTopics, CreatePartitions through the KIP-599 gate;
* `client_quotas.py`: DescribeClientQuotas and AlterClientQuotas, answered by kqp (`admin.manage_quotas`);
* `sasl.py`: SaslHandshake and SaslAuthenticate, whatever `sasl.mode` says.
"""
