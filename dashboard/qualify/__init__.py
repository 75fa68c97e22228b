"""Model qualification in the console (issue 33): scorecards stored, shown and compared."""
