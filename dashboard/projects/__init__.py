"""Projects: who sees which agents, and what they may do to them (issue 31)."""
