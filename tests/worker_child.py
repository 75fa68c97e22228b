"""What a test runs in another process against its own database (see worker_settings.py).

    python -m tests.worker_child claim WORKER_ID   -> prints the session id it won, or "-"
    python -m tests.worker_child demo              -> prints the demo run queued, or "-"
    python -m tests.worker_child page SESSION_ID USER -> prints the index rows the page shows

Each waits for a line on stdin before acting, so a test can line several up first.
"""

from __future__ import annotations

import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker_settings")
    django.setup()
    print("ready", flush=True)
    sys.stdin.readline()
    action, *args = argv
    if action == "claim":
        from dashboard.runs.worker import claim_next

        run = claim_next(args[0], lease_s=60)
        print(run.session_id if run else "-", flush=True)
    elif action == "demo":
        from dashboard.runs.demo import start_demo_once

        run = start_demo_once(pause_s=0)
        print(run.session_id if run else "-", flush=True)
    elif action == "page":
        from django.contrib.auth import get_user_model
        from django.test import Client

        client = Client()
        client.force_login(get_user_model().objects.get(username=args[1]))
        response = client.get(f"/sessions/{args[0]}/", HTTP_HOST="localhost")
        assert response.status_code == 200, response.status_code
        print(response.content.decode().count('<tr class="tier-'), flush=True)
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
