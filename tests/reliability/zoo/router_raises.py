"""lich_make_router that raises (documented: the error propagates as a configuration error)."""

from lich import hookimpl


@hookimpl(tryfirst=True)
def lich_make_router(providers, config):
    raise RuntimeError("router_raises cannot route")
