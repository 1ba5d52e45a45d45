"""The user's process: the session with the cluster, allocation handles, global buffers,
lookups, and the one path that sends work to workers."""
