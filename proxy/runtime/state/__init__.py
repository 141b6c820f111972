"""The admin state files (quotas, ACLs): locked atomic writes shared by processes, and their history."""
