"""One quota for a fleet of kqp processes: what each shares and how it merges the others' (the store's rules beside)."""
