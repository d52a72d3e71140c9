"""A stand-in service for the supervisor's tests: an HTTP server on 127.0.0.1 that answers
``GET`` with 200, started in a few hundredths of a second.

    python tests/standins/service.py PORT DIR

Each start appends one line to ``DIR/starts`` (time, pid, argv, ``$STANDIN_TAG``). Files in
``DIR`` steer it: ``exit`` holds an exit code it ends with at once, after printing
``port taken`` (a crash loop), or once the stand-ins that ``exit-after`` names (siblings of
``DIR``) have started, up to 30 s; while ``hang`` exists it answers 503 (a service that stopped
answering). With ``via`` holding a URL it answers 200 only while that URL does (a health
check that goes through another service, as the runner's goes through Prefect).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    port, state = int(sys.argv[1]), Path(sys.argv[2])
    with (state / "starts").open("a") as out:
        out.write(f"{time.time()} {os.getpid()} {' '.join(sys.argv[1:])} {os.environ.get('STANDIN_TAG', '')}\n")
    if (state / "exit").exists():
        others = (state / "exit-after").read_text().split() if (state / "exit-after").exists() else []
        deadline = time.monotonic() + 30
        while not all((state.parent / name / "starts").exists() for name in others) and time.monotonic() < deadline:
            time.sleep(0.02)
        print("port taken", flush=True)
        raise SystemExit(int((state / "exit").read_text()))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ok = not (state / "hang").exists()
            if ok and (state / "via").exists():
                try:
                    ok = urllib.request.urlopen((state / "via").read_text(), timeout=1).status == 200
                except OSError:
                    ok = False
            self.send_response(200 if ok else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
