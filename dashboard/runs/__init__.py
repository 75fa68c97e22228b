"""Runs: Scroll's own agent loop started from the console, the workers that claim and run
them, tuning profiles, cross-agent grants and the permissions to run code."""
