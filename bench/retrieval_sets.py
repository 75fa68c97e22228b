"""Scroll's search against plain BM25 on every retrieval set, one run (issue 34).

    python bench/retrieval_sets.py --json

The same as ``python bench/retrieval.py --sets``: every per-conversation row of the
retrieval bench on LoCoMo (test and dev), on the generated long assistant conversations
(``bench/_assistant_sessions.py``; dev and held-out parts) and on the transcript questions
(``bench/_heldout.py``; held out), each beside that set's own plain BM25 measured in the same
run, with the shipped row minus plain at recall@1, @5 and @10 and whether it is at or above
plain on every set. Its own results file, so the table is refreshed without the full
bench's million-event ablation.
"""

from __future__ import annotations

import sys

from retrieval import main

if __name__ == "__main__":
    main(["--sets", *sys.argv[1:]])
