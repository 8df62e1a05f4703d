"""Through the proxy a tenant recalls and captures within its own memory only: another tenant
naming the same session and asking for the same words gets nothing of it."""

from __future__ import annotations

from stratamem.testing import Reply
from tests.api.conftest import ADMIN_KEY
from tests.proxy.conftest import HTTP, Proxied, user

SECRET = "zanzibar"


def test_another_tenant_with_the_same_session_recalls_nothing_of_it(proxied: Proxied) -> None:
    proxied.upstream.handler = lambda request: Reply.text("ok")
    same = {"X-Stratamem-Session": "shared"}
    proxied.client().chat.completions.create(
        model="m", messages=[user(f"My {SECRET} code is 4417")], extra_headers=same)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    HTTP.post(f"{proxied.url}/v1/admin/tenants", json={"name": "bob"}, headers=admin)
    token = HTTP.post(f"{proxied.url}/v1/admin/tenants/bob/keys", json={},
                       headers=admin).json()["token"]  # fmt: skip
    bob = Proxied(proxied.services, proxied.upstream, proxied.url, "bob", token)
    bob.client().chat.completions.create(
        model="m", messages=[user(f"What is my {SECRET} code?")], extra_headers=same)
    sent = proxied.upstream.calls(path="/v1/chat/completions")[-1]
    assert "4417" not in str(sent.body)
    assert bob.said("shared") == [("user", f"What is my {SECRET} code?"), ("assistant", "ok")]
    assert proxied.said("shared") == [("user", f"My {SECRET} code is 4417"), ("assistant", "ok")]
