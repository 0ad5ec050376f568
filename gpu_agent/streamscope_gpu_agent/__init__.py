"""Per-node daemon sampling the GPU (NVML) and the serving engine's metrics."""
