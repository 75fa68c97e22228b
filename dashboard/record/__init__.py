"""The record of every upstream model call: stored (``store``), read back exactly
(``read``); the console's inspector, cost and budget chart read it."""
