"""The recording gateway (``streamscope gateway``): a transparent reverse proxy in front of an engine that records
the ``gateway`` side of every stream it relays.

``app`` forwards requests and answers, ``headers`` says which headers cross it, ``run`` serves it with its spans
exported over OTLP; ``streamscope.StreamMiddleware`` (side ``gateway``) does the recording.
"""
