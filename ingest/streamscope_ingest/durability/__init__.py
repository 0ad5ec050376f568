"""Accepted batches made durable before they are acknowledged: the spool, and the group commit draining it."""
