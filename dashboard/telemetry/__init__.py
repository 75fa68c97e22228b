"""Telemetry: the span sink that keeps finished spans for the console, the "rotting index"
alerts raised from them, and what each call cost."""
