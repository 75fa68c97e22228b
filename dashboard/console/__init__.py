"""The console: the operator's pages, their live WebSocket consumers, the call inspector and
the replay lab. It reads what the other apps record and owns no table."""
