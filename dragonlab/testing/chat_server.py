"""A chat-completions server on loopback that speaks the OpenAI protocol, for the LLM baseline's tests
(and the plain completions endpoint, as servers of models without a chat template use it)."""

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "tiny-chat"


class ChatServer:
    """Speaks POST /v1/chat/completions and /v1/completions as an OpenAI-compatible server does, and
    records every request. `fail_with`: statuses to answer with first, one per request; `per_request`: the most
    choices one response holds (None: as many as asked); `contents(k, body)`: the k-th reply overall, to the request `body`."""

    def __init__(self):
        self.requests: list[dict] = []
        self.fail_with: list[int] = []
        self.per_request: int | None = None
        self.contents = lambda k, body: f"Here is a script.\n```text\nget C{k}\n```\nIt tiles nothing."
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.http.chat = self
        self.base_url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def answer(self, path: str, raw: bytes, authorization: str | None) -> tuple[int, dict]:
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"error": {"message": "body is not JSON"}}
        self.requests.append({"path": path, "body": body, "authorization": authorization})
        chat = path == "/v1/chat/completions"
        if not chat and path != "/v1/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        if body.get("model") != MODEL:
            return 404, {"error": {"message": f"model {body.get('model')!r} does not exist"}}
        roles = [m.get("role") for m in body.get("messages", [])]
        asked = roles == ["system", "user"] if chat else isinstance(body.get("prompt"), str) and not roles
        if not asked or not {"n", "temperature", "max_tokens", "seed"} <= set(body):
            return 400, {"error": {"message": f"bad request: roles {roles}, fields {sorted(body)}"}}
        if self.fail_with:
            return self.fail_with.pop(0), {"error": {"message": "try again"}}
        served = sum(len(r.get("served", ())) for r in self.requests)
        k = range(served, served + min(body["n"], self.per_request or body["n"]))
        self.requests[-1]["served"] = k
        if not chat:
            return 200, {"object": "text_completion", "model": MODEL,
                         "choices": [{"index": i, "text": self.contents(j, body), "finish_reason": "stop"}
                                     for i, j in enumerate(k)]}
        return 200, {"object": "chat.completion", "model": MODEL,
                     "choices": [{"index": i, "message": {"role": "assistant", "content": self.contents(j, body)},
                                  "finish_reason": "stop"} for i, j in enumerate(k)]}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, payload = self.server.chat.answer(self.path, raw, self.headers.get("Authorization"))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def serving():
    chat = ChatServer()
    thread = threading.Thread(target=chat.http.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield chat
    finally:
        chat.http.shutdown()
        chat.http.server_close()
        thread.join()
