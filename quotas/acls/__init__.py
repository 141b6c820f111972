"""Kafka's ACLs: the bindings, the StandardAuthorizer's decision, and the admin API's changes over the file's."""
