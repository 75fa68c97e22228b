"""Date and time formats for the console's locale (``FORMAT_MODULE_PATH`` in settings)."""
