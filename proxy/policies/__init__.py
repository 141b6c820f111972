"""Policies every connection of a process shares, built once where the server is assembled.

The connection core (`kqp.proxy.connection`) is per connection; what lives here is decided for the
whole process and consulted by the core's API handlers:

* `mutation_gate`: KIP-599's `controller_mutation_rate`, topic by topic, as a controller enforces it
  (with `broker_checks`, the broker's own refusals that come before the quota);
* `topic_metadata`: the partition counts the gate's costs need, a cache fed by Metadata answers;
* `quota_admin`: Kafka's quota admin API (DescribeClientQuotas, AlterClientQuotas) answered by kqp.

Like the core they are sans-io: no clock (`now` is an argument), no socket, no event loop. What
needs I/O (the topic lookup, the state-file commit) is asked for by the core as an action, carried
out by the runtime and answered with an event (`kqp.proxy.connection.awaiting`).
"""
