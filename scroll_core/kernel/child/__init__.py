"""Code that runs inside the kernel process.

Everything in this package uses only the standard library and relative imports, because the
child runs ``python -I -S`` with nothing but the runtime and this folder visible. The host
may import these modules too (the wire format is shared), never the other way round.
"""
