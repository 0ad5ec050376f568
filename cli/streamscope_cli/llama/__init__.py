"""llama.cpp's real ``llama-server`` as a component: built from PyPI's source, served with tiny generated models."""
