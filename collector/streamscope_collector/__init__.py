"""The OTLP receiver service: thin HTTP and gRPC adapters over one export pipeline."""
