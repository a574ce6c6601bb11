"""server/http/errors.py's table for the stores' errors, through the work-order trail's routes on a
minimal FastAPI app: an audit log that could not be opened is a 503 with its reason, a bad
filter a 400, on the list and the export alike. No model, no engine.

The chat history's rows (404, 400, 503) are tested with its routes in test_conversations.py.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.http import errors
from server.stores.audit import AuditLog
from server.http.routes.workorders import router


def client(audit=None, audit_error=None) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.state.audit, app.state.audit_error = audit, audit_error
    app.include_router(router)
    return TestClient(app)


def test_an_audit_log_that_did_not_open_is_503_with_its_reason():
    c = client(audit_error="/x/workorders.sqlite3 is not a flashdesk audit log. HINT: move it")
    for url in ("/v1/workorders", "/v1/workorders/export", "/v1/workorders/wo_1"):
        r = c.get(url)
        assert r.status_code == 503 and r.json()["error"]["code"] == "audit_unavailable", url
        assert "HINT: move it" in r.json()["error"]["message"]


@pytest.mark.parametrize("params", [{"status": "lost"}, {"since": "yesterday-ish"}, {"until": "2024-13-01"}])
def test_bad_filters_are_400_on_the_list_and_the_export(tmp_path, params):
    with AuditLog(tmp_path / "workorders.sqlite3") as audit:
        c = client(audit)
        for url in ("/v1/workorders", "/v1/workorders/export"):
            r = c.get(url, params=params)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (url, r.text)
        assert c.get("/v1/workorders", params={"needs_review": "true", "q": "x"}).json()["total"] == 0
