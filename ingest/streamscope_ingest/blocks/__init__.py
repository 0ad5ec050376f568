"""The column blocks every layer shares: each table's Arrow schema, a decoded batch, Arrow IPC streams, and what a
stall is."""
