"""The gateway's Django/ASGI glue: the ``/v1/`` routes answered in front of the console's
Django app (``asgi``, ``endpoints``), key auth and the per-process sessions, upstreams and
caches (``service``), and each gateway session shown in the console as a run of kind
``gateway`` (``recorder``). The logic is ``scroll_core.gateway``."""
