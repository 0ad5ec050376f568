"""`streamscope bench` and `streamscope compare`: load any streaming endpoint, and gate a release on its streams."""
