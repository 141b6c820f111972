"""End-to-end tests: kqp as a subprocess, real clients, real upstreams, real sockets."""
