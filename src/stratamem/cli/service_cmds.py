"""CLI commands of the service: `serve`, and `tenants` / `keys` over the embedded store."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import click

from stratamem.cli.common import existing_store, print_json, settings_from
from stratamem.config import Settings
from stratamem.domain import Scope
from stratamem.errors import ConfigError
from stratamem.store.opening import open_stores
from stratamem.store.tenants.port import TenantStore


@click.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="STRATAMEM_CONFIG",
    default=None,
    help="TOML file: core settings on top, then [server] and [pipeline] tables"
    " [env STRATAMEM_CONFIG].",
)
@click.option("--host", default=None, help="Interface [env STRATAMEM_SERVER_HOST; 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port [env STRATAMEM_SERVER_PORT; 8420].")
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Pipeline consumers in this process; 0: API only [env STRATAMEM_SERVER_WORKERS; 2].",
)
@click.option(
    "--processes",
    type=int,
    default=None,
    help="API processes on the one port (one core each) [env STRATAMEM_SERVER_PROCESSES; 1].",
)
@click.pass_context
def serve(
    ctx: click.Context,
    config_file: Path | None,
    host: str | None,
    port: int | None,
    workers: int | None,
    processes: int | None,
) -> None:
    """Run the HTTP API, and the pipeline workers, until SIGINT / SIGTERM."""
    server_module = _server_module()
    overrides = settings_from(ctx).model_dump(include={"data_dir", "embedder"}, exclude_unset=True)
    server = {"host": host, "port": port, "workers": workers, "processes": processes}
    settings = server_module.load_settings(config_file, overrides, server)
    server_module.serve(settings, announce=lambda line: click.echo(line, err=True))


@click.command("mcp")
@click.option("--tenant", required=True, help="The tenant whose memory the tools use.")
@click.pass_context
def mcp(ctx: click.Context, tenant: str) -> None:
    """Serve the MCP tools over stdio for one tenant (for an agent on this machine)."""
    settings = existing_store(settings_from(ctx))  # a mistyped --data-dir: refused, not created
    _check_tenant(settings, tenant)
    _server_module("stratamem.api.mcp_server").run_stdio(settings, tenant)


def _check_tenant(settings: Settings, tenant: str) -> None:
    """`tenant` is registered or has records; else `ConfigError` naming the ones there are (an
    MCP host configured with a typo would otherwise seem to work, recalling nothing)."""
    stores = open_stores(settings)
    try:
        registered = [t.name for t in stores.tenants().list_tenants()]
        stats = stores.core.stats(Scope(tenant))
    finally:
        stores.close()
    if tenant in registered or stats["L0"]["records"] or stats["L1"]["records"]:
        return
    known = ", ".join(registered[:20]) or "none"
    raise ConfigError(
        f"tenant {tenant!r} is not registered in {settings.data_dir} and has nothing stored:"
        f" create it with `stratamem tenants create {tenant}` (registered: {known})"
    )


def _server_module(name: str = "stratamem.api.server") -> ModuleType:
    """Service code, imported only by `serve` / `mcp`: the other commands work without the extra."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"this command needs the server extra ({exc.name} is missing):"
            " pip install 'stratamem[server]'"
        ) from exc


@contextmanager
def _tenant_store(ctx: click.Context) -> Iterator[TenantStore]:
    settings = settings_from(ctx)
    stores = open_stores(settings)
    try:
        yield stores.tenants()
    finally:
        stores.close()


@click.group()
def tenants() -> None:
    """Tenants of the service (each API key belongs to one)."""


@tenants.command("create")
@click.argument("name")
@click.option("--label", default="", help="A free-text description.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def create_tenant(ctx: click.Context, name: str, label: str, as_json: bool) -> None:
    """Create a tenant."""
    with _tenant_store(ctx) as store:
        tenant = store.create_tenant(name, label)
    if as_json:
        print_json(tenant.to_json())
    else:
        click.echo(f"created tenant {tenant.name}")


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_tenants(ctx: click.Context, as_json: bool) -> None:
    """List tenants."""
    with _tenant_store(ctx) as store:
        found = store.list_tenants()
    if as_json:
        print_json([t.to_json() for t in found])
        return
    for tenant in found:
        click.echo(f"{tenant.name}\t{tenant.label}")


@click.group()
def keys() -> None:
    """API keys: each maps to one tenant and is stored only hashed."""


@keys.command("create")
@click.argument("tenant")
@click.option("--label", default="", help="What the key is for.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def create_key(ctx: click.Context, tenant: str, label: str, as_json: bool) -> None:
    """Issue a key for TENANT; the key is printed once and cannot be shown again."""
    with _tenant_store(ctx) as store:
        issued = store.create_key(tenant, label)
    if as_json:
        print_json({**issued.key.to_json(), "token": issued.token})
    else:
        click.echo(issued.token)


@keys.command("revoke")
@click.argument("key_id")
@click.pass_context
def revoke_key(ctx: click.Context, key_id: str) -> None:
    """Revoke a key by its id (the 12 hex digits after `smk_`)."""
    with _tenant_store(ctx) as store:
        key = store.revoke_key(key_id)
    click.echo(f"revoked {key.key_id} of tenant {key.tenant}")


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_keys(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """List keys (ids, tenants, labels; never the keys themselves)."""
    with _tenant_store(ctx) as store:
        found = store.list_keys(tenant)
    if as_json:
        print_json([k.to_json() for k in found])
        return
    for key in found:
        state = "revoked" if key.revoked_at is not None else "live"
        click.echo(f"{key.key_id}\t{key.tenant}\t{state}\t{key.label}")
