"""Real receivers for what the portal sends out: an SMTP server (aiosmtpd) and an HTTP server
that records each webhook call. Both listen on a free loopback port in a thread of the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from scripts.testbed.ports import free_port


@dataclass
class ReceivedMail:
    sender: str
    recipients: list[str]
    message: EmailMessage


@dataclass
class MailRecorder:
    """An aiosmtpd handler: every message accepted is kept, parsed."""

    received: list[ReceivedMail] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = message_from_bytes(envelope.original_content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        self.received.append(
            ReceivedMail(
                sender=envelope.mail_from, recipients=list(envelope.rcpt_tos), message=message
            )
        )
        return "250 Message accepted for delivery"


@dataclass
class SmtpServer:
    host: str
    port: int
    recorder: MailRecorder

    @property
    def received(self) -> list[ReceivedMail]:
        return self.recorder.received


def run_smtp_server() -> Iterator[SmtpServer]:
    """An SMTP server on loopback for the test's length (a fixture's body)."""
    recorder = MailRecorder()
    controller = Controller(recorder, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield SmtpServer(host="127.0.0.1", port=controller.port, recorder=recorder)
    finally:
        controller.stop()


@dataclass(frozen=True)
class RecordedCall:
    path: str
    headers: dict[str, str]
    body: Any


class WebhookReceiver(ThreadingHTTPServer):
    """Answers every POST with `status` and records it (path, headers, JSON body)."""

    daemon_threads = True

    def __init__(self, status: int = 200) -> None:
        self.calls: list[RecordedCall] = []
        self.status = status
        super().__init__(("127.0.0.1", 0), _RecordingHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _RecordingHandler(BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        self.server.calls.append(
            RecordedCall(path=self.path, headers=dict(self.headers.items()), body=json.loads(raw))
        )
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's signature
        """Quiet: the test reads the calls."""


def run_webhook_receiver(status: int = 200) -> Iterator[WebhookReceiver]:
    """A recording webhook receiver on loopback for the test's length (a fixture's body)."""
    receiver = WebhookReceiver(status)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()
