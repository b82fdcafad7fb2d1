"""A small HTTP server for the remote-image tests: serves one directory on 127.0.0.1 with
ranged GETs (206 and Content-Range, suffix ranges too), an ETag per file and If-Match, and
counts what it was asked. Started and stopped by the test that uses it."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import List, Tuple


class RangeServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: List[Tuple[str, str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                server.requests.append((self.command, self.path, self.headers.get("Range", "")))
                path = server.root / self.path.split("?", 1)[0].lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                etag = '"%s"' % hashlib.md5(data).hexdigest()
                match = self.headers.get("If-Match")
                if match is not None and match != etag:
                    self.send_error(412)
                    return
                start, end, status = 0, len(data), 200
                asked = self.headers.get("Range")
                if asked:
                    m = re.fullmatch(r"bytes=(\d*)-(\d*)", asked.strip())
                    if not m or (not m.group(1) and not m.group(2)):
                        self.send_error(416)
                        return
                    if m.group(1):
                        start = int(m.group(1))
                        end = min(int(m.group(2)) + 1, len(data)) if m.group(2) else len(data)
                    else:
                        start = max(len(data) - int(m.group(2)), 0)
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                self.send_response(status)
                self.send_header("ETag", etag)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(end - start))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                if body:
                    self.wfile.write(data[start:end])

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                # A client may close a connection it no longer needs (squashd drops the answer
                # to its open's tail request when the metadata came another way): not an error.
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "RangeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
