"""kqp.proxy.tls: TLS at kqp's two edges: contexts built from the config and reloaded when their files
change, the handshake's outcome on kqp's listeners, and who a client is by its certificate."""
