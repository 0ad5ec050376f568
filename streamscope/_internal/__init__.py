"""Implementation modules; the public surface is re-exported from ``streamscope``."""
