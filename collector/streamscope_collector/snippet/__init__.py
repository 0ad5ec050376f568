"""The browser snippet (``streamscope.js``), served by the collector at ``/sdk/streamscope.js``."""
