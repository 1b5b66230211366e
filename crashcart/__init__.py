"""CrashCart: finds and proves the root cause of failed multi-node GPU training jobs."""
