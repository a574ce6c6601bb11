"""The clients of the soak benchmark (bench/soak.py): each one a thread that, until its deadline,
picks a request kind at random and records what came back.

Kinds, with the weights they are drawn by:
  chat        streamed chat completion through the `openai` client, greedy or sampled
  workorder   POST /v1/workorders/parse of a dev work order (its audit record id is kept)
  conversation  create a conversation or continue one, append a user and an assistant message,
              sometimes "regenerate" (delete after a seq), read it back (the message ids are kept)
  disconnect  a streamed chat the client hangs up on after its first content chunk
  bad/*       malformed JSON, an unknown model, a prompt longer than the context, an unknown field

Every request becomes one record: {kind, status, ms, t}. `status` is the HTTP status, or what
went wrong after a 2xx: "stream_error" (an SSE error event), "no_finish" (a stream that ended
without a finish_reason), "bad_body" (a body without the fields the API promises),
"read_mismatch" (a conversation read back otherwise than written); or "timeout", "conn_error". What the clients were
told was stored (work-order ids, conversation and message ids) is kept in `Acked`, so that the
soak can ask the server afterwards what it still has.

Not a test: nothing here asserts; the soak judges the records.
"""

from __future__ import annotations

import collections
import json
import random
import threading
import time
from dataclasses import dataclass, field

import httpx
import openai

from bench import datasets

MODEL = "smollm2"
WEIGHTS = {"chat": 4, "workorder": 2, "conversation": 3, "disconnect": 1, "bad": 1}
# What a bad request must get: a 4xx that names the problem, never a 5xx or a hang.
BAD_EXPECT = {"bad/json": 400, "bad/model": 404, "bad/long": 400, "bad/field": 400}
EXPECT = {"chat": 200, "workorder": 200, "conversation": 200, "disconnect": 200, **BAD_EXPECT}
SMALL_SCHEMA = {"type": "object", "required": ["customer_name", "quantity", "due_date"], "properties": {
    "customer_name": {"type": ["string", "null"], "maxLength": 80},
    "quantity": {"type": ["integer", "null"], "minimum": 0, "maximum": 1000000},
    "due_date": {"type": ["string", "null"], "format": "date"}}}
TIMEOUT = httpx.Timeout(600.0, connect=10.0)  # a parse queued behind others on a shared 2-core CPU is slow


def _has_text(data: str) -> bool:
    try:
        choices = json.loads(data).get("choices") or [{}]
    except json.JSONDecodeError:
        return False
    return bool((choices[0].get("delta") or {}).get("content"))


@dataclass
class Acked:
    """What the server answered as stored, per client (one client owns each of its conversations,
    so no lock is needed for the ids; the lists are only appended to)."""
    workorders: list[str] = field(default_factory=list)  # audit record ids from 200 parses
    conversations: dict[str, list[dict]] = field(default_factory=dict)  # id -> [{"id", "seq"}] still expected


class Client(threading.Thread):
    def __init__(self, n: int, base: str, deadline: float, t0: float, max_tokens: int, records: list, seed: int):
        super().__init__(name=f"soak-client-{n}", daemon=True)
        self.n, self.base, self.deadline, self.t0, self.max_tokens = n, base, deadline, t0, max_tokens
        self.records, self.rng, self.acked = records, random.Random(seed * 1000 + n), Acked()
        self.http = httpx.Client(base_url=base, timeout=TIMEOUT)
        self.oa = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600.0)
        self.prompts = [p for p in datasets.dev_prompts() if p.get("messages")]
        self.orders = datasets.workorders()
        self.kinds, self.weights = list(WEIGHTS), list(WEIGHTS.values())

    def run(self) -> None:
        # A first tour of every kind (the cheap ones first, each client from its own place), so that even
        # a run of seconds writes a conversation and sends a bad request; then the weighted draw.
        tour = collections.deque(["conversation", "bad", "workorder", "disconnect", "chat"])
        tour.rotate(-self.n)
        while time.time() < self.deadline:
            kind = tour.popleft() if tour else self.rng.choices(self.kinds, self.weights)[0]
            if kind == "bad":
                kind = self.rng.choice(list(BAD_EXPECT))
            start, self.detail, self.what = time.perf_counter(), None, None  # what: which variant of the kind
            try:
                status = getattr(self, "do_" + kind.replace("bad/", "bad_"))()
            except openai.APIStatusError as e:
                status, self.detail = e.status_code, e.message
            except (openai.APITimeoutError, httpx.TimeoutException) as e:
                status, self.detail = "timeout", repr(e)
            except (openai.APIConnectionError, httpx.HTTPError) as e:
                status, self.detail = "conn_error", repr(e)
            except openai.APIError as e:  # an `event: error` in a stream that had started with a 200
                status, self.detail = "stream_error", e.message
            except (KeyError, ValueError) as e:  # a 2xx whose body is not what the API promises
                status, self.detail = "bad_body", repr(e)
            ms = (time.perf_counter() - start) * 1000.0
            rec = {"kind": kind, "status": status, "ms": round(ms, 1), "t": round(time.time() - self.t0, 1),
                   "client": self.n}
            if self.what:
                rec["what"] = self.what
            if status != EXPECT[kind] and self.detail:  # what the server said, for the report's unexpected list
                rec["detail"] = str(self.detail)[:300]
            self.records.append(rec)
            time.sleep(self.rng.uniform(0.1, 0.8))  # think time: users do not fire back to back
        self.http.close()

    # -- the kinds: each returns the status it got (or raises) ---------------------------------

    def told(self, r: httpx.Response) -> int:
        if r.status_code >= 400:
            self.detail = r.text
        return r.status_code

    def do_chat(self) -> int:
        p = self.rng.choice(self.prompts)
        sampled = self.rng.random() < 0.3
        finish = None
        stream = self.oa.chat.completions.create(
            model=MODEL, messages=p["messages"], stream=True, stream_options={"include_usage": True},
            max_tokens=self.rng.randint(8, self.max_tokens), temperature=0.8 if sampled else 0,
            seed=self.rng.randint(0, 2**31) if sampled else None)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return 200 if finish else "no_finish"  # a 200 stream must end with a finish_reason

    def do_disconnect(self) -> int:
        p = self.rng.choice(self.prompts)
        body = {"model": MODEL, "messages": p["messages"], "stream": True, "max_tokens": 4 * self.max_tokens}
        with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code == 200:
                for line in r.iter_lines():
                    if line.startswith("data:") and '"content"' in line and _has_text(line[5:]):
                        break  # hang up mid-answer: leaving the block closes the connection
            else:
                r.read()  # a refusal: its body says why
            return self.told(r)

    def do_workorder(self) -> int:
        o = self.rng.choice(self.orders)
        body = {"text": o["text"], "sent_date": o["sent"]}
        if self.rng.random() < 0.4:  # the built-in template: its answer needs >= 2 x its closing reserve (212)
            body |= {"template": "work_order", "max_tokens": 448}
            self.what = "template work_order"
        else:  # a caller's own small schema: a short answer, so the parses keep coming on a slow CPU
            body |= {"schema": SMALL_SCHEMA, "instructions": "Read the customer, the total quantity and the due date.",
                     "max_tokens": 160}
            self.what = "small schema"
        r = self.http.post("/v1/workorders/parse", json=body)
        if r.status_code == 200:
            self.acked.workorders.append(r.json()["id"])
        return self.told(r)

    def do_conversation(self) -> int:
        convs = self.acked.conversations
        if convs and self.rng.random() < 0.6:
            cid = self.rng.choice(list(convs))
        else:
            r = self.http.post("/v1/conversations", json={"title": None, "settings": {"temperature": 0.3}})
            if r.status_code != 201:
                return self.told(r)
            cid = r.json()["id"]
            convs[cid] = []
        if convs[cid] and self.rng.random() < 0.15:  # Regenerate: drop the last answer, as the UI does
            after = convs[cid][-1]["seq"] - 1
            r = self.http.delete(f"/v1/conversations/{cid}/messages", params={"after": after})
            if r.status_code != 200:
                return self.told(r)
            convs[cid] = [m for m in convs[cid] if m["seq"] <= after]
        p = self.rng.choice(self.prompts)["messages"][-1]["content"]
        for role, content, meta in (("user", p, None),
                                    ("assistant", "好的，" + p[::-1][:300], {"finish_reason": "stop"})):
            r = self.http.post(f"/v1/conversations/{cid}/messages",
                               json={"role": role, "content": content, "meta": meta})
            if r.status_code != 201:
                return self.told(r)
            m = r.json()
            convs[cid].append({"id": m["id"], "seq": m["seq"]})
        r = self.http.get(f"/v1/conversations/{cid}")
        if r.status_code == 200 and [m["id"] for m in r.json()["messages"]] != [m["id"] for m in convs[cid]]:
            return "read_mismatch"  # read back at once, it differs from what was acknowledged
        return self.told(r)

    def do_bad_json(self) -> int:
        path = self.rng.choice(["/v1/chat/completions", "/v1/workorders/parse", "/v1/conversations"])
        r = self.http.post(path, content=b'{"model": "smollm2", "messages": [',  # cut off mid-body
                           headers={"content-type": "application/json"})
        return self.told(r)

    def do_bad_model(self) -> int:
        self.oa.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}],
                                        max_tokens=8)
        return 200

    def do_bad_long(self) -> int:
        words = " ".join(self.rng.choice(["flyer", "banner", "印刷", "deadline", "quantity"]) for _ in range(4000))
        out = self.oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": words}],
                                              max_tokens=self.max_tokens, stream=self.rng.random() < 0.5)
        for _ in out if isinstance(out, openai.Stream) else ():  # not refused: read it to its end
            pass
        return 200

    def do_bad_field(self) -> int:
        r = self.http.post("/v1/workorders/parse", json={"text": "500 flyers", "templat": "work_order"})
        return self.told(r)
