"""Every request authorized as a broker would: per-API rules, fetch sessions, and the ACL admin API."""
