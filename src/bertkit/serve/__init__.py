"""``bertkit serve``: the HTTP app over :mod:`bertkit.inference` (routes, batching, limits, metrics).

``app.create_app(settings)`` builds it; ``worker`` merges concurrent embedding requests under a
token budget; ``limits`` refuses what is over the limits before a body is parsed; ``errors``
answers every failure with JSON.
"""
