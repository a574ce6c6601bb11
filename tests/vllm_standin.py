"""A loopback stand-in for the two GETs of a vLLM server that llama-cpp-python's server (tests/backend_server.py)
lacks: GET /v1/models and the Prometheus GET /metrics with vLLM's speculative-decoding counters. It answers
nothing else (a chat is llama-cpp-python's to test), and `metrics = None` makes /metrics a 404, as on a
server that publishes none.

The text follows what vLLM's `prometheus_client` writes (vllm.v1.spec_decode.metrics SpecDecodingProm): HELP
and TYPE lines, `_total` counters labelled by engine and model, their `_created` twins, the per-position
counter, and other metrics around them. Threads, stdlib only; not a fixture: a test module starts its own.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "Qwen/Qwen3-8B"  # vLLM names a model by its Hugging Face id


def prometheus(drafts: int, draft_tokens: int, accepted: int, engines: int = 2) -> str:
    """vLLM's /metrics text with these totals split over `engines` data-parallel engines (the parser sums them)."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{e}",model_name="{MODEL}"}} 1.0' for e in range(engines)]
    for name, total, help_ in (("num_drafts", drafts, "Number of spec decoding drafts."),
                               ("num_draft_tokens", draft_tokens, "Number of draft tokens."),
                               ("num_accepted_tokens", accepted, "Number of accepted tokens.")):
        metric = f"vllm:spec_decode_{name}"
        lines += [f"# HELP {metric}_total {help_}", f"# TYPE {metric}_total counter"]
        shares = [total // engines + (e < total % engines) for e in range(engines)]
        lines += [f'{metric}_total{{engine="{e}",model_name="{MODEL}"}} {float(n)}' for e, n in enumerate(shares)]
        lines += [f"# HELP {metric}_created {help_}", f"# TYPE {metric}_created gauge"]
        lines += [f'{metric}_created{{engine="{e}",model_name="{MODEL}"}} 1.7646e+09' for e in range(engines)]
    lines += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
              "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
              f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{MODEL}",position="0"}} '
              f"{float(drafts)}"]
    return "\n".join(lines) + "\n"


class VllmStandin:
    """The two GETs on a free loopback port; `metrics` (Prometheus text, or None for a 404) may change between
    requests. stop() ends it."""

    def __init__(self, metrics: str | None):
        self.metrics = metrics
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/v1/models":
                    standin._send(self, 200, "application/json", json.dumps({"object": "list", "data": [
                        {"id": MODEL, "object": "model", "created": 1764600000, "owned_by": "vllm", "root": MODEL,
                         "parent": None, "max_model_len": 8192}]}))
                elif self.path == "/metrics" and standin.metrics is not None:
                    standin._send(self, 200, "text/plain; version=0.0.4; charset=utf-8", standin.metrics)
                else:
                    standin._send(self, 404, "application/json", json.dumps({"detail": "Not Found"}))

            def log_message(self, *args):  # quiet: pytest shows what a failing test printed
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, text: str) -> None:
        body = text.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
