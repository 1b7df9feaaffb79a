"""Run the Argo CD health check (docs/argocd/health.lua) the way Argo CD does: Lua 5.1, `obj`."""

from __future__ import annotations

from typing import Any

from lupa import lua51

from .helpers import ROOT

HEALTH_LUA = ROOT / "docs" / "argocd" / "health.lua"
ARGOCD_MISSING_LIBRARIES = ("string", "math", "io", "coroutine", "debug")


def _to_lua(runtime: Any, value: Any) -> Any:
    """JSON-like Python data as Lua values; None becomes an absent key, as in Argo CD."""
    if isinstance(value, dict):
        return runtime.table_from(
            {key: _to_lua(runtime, item) for key, item in value.items() if item is not None}
        )
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, item) for item in value])
    return value


def argocd_health(obj: dict[str, Any], script: str | None = None) -> dict[str, str]:
    """The health (status, message) the script returns for one resource."""
    runtime = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    lua_globals = runtime.globals()
    # Argo CD opens only the base, table, package and (a safe) os library for health scripts.
    for library in ARGOCD_MISSING_LIBRARIES:
        lua_globals[library] = None
    lua_globals.obj = _to_lua(runtime, obj)
    result = runtime.execute(script if script is not None else HEALTH_LUA.read_text())
    return {"status": str(result["status"]), "message": str(result["message"] or "")}
