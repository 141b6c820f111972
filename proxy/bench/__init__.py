"""kqp bench: side-by-side benchmark of kqp against direct, a bare relay and the tansu proxy."""
