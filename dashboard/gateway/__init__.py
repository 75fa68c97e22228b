"""The gateway's Django/ASGI glue: key auth, async views on the console's ASGI app, the
upstream client per key, and each gateway session shown in the console as a run of kind
``gateway``. The logic is ``scroll_core.gateway``."""
