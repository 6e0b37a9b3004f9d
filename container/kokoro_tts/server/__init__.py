"""The process: the ASGI app and its lifecycle, ``serve`` on Hypercorn, the Hypercorn hardening, request ids."""
