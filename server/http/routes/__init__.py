"""The HTTP routes, one module per API family, each an `APIRouter` that server/http/app.py includes.

openai (chat and text completions, models), workorders (parse, templates, the audit
trail), conversations (the chat history), store (the model store and its jobs), system
(the hardware report), health (is the model ready), metrics (Prometheus totals).

What this is not: the logic behind them. Validation lives in server/http/schemas.py, the
work-order feature in server/workorders/, storage in server/stores/audit.py and
server/stores/conversations.py, errors in server/http/errors.py; a route module only joins them.
"""
