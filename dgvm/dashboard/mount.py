"""How the dashboard joins a scheduler's HTTP server.

Two moments, because distributed builds its dashboard once, while the scheduler starts:

- ``register`` runs when ``dgvm.scheduler.plugin`` is imported. A scheduler imports its preloads
  (``--preload dgvm.scheduler``, which ``dgvm.LocalCluster`` uses) before it builds its HTTP
  server, so listing ``dgvm.dashboard.routes`` in ``distributed.scheduler.http.routes`` then
  makes distributed itself mount the JSON API and build the pages into its dashboard: they
  appear in the "More..." menu and in ``individual-plots.json`` (JupyterLab's list).
- ``install`` runs in ``GVATPlugin.start``. It makes the scheduler's ``DashboardSource`` and
  registers the Prometheus collector. On a scheduler that was already serving when the
  plugin arrived (``dgvm.connect`` to a plain Dask cluster) it adds what is missing: the
  JSON routes, and the pages as a second Bokeh application beside distributed's, with
  entries in the same "More..." menu (JupyterLab's list is not rebuilt).
"""

from __future__ import annotations

import logging
import sys

import dask.config
from tornado.httputil import HTTPHeaders, HTTPServerRequest
from tornado.ioloop import IOLoop

from dgvm.dashboard import api, metrics
from dgvm.dashboard.source import EXTENSION, DashboardSource

logger = logging.getLogger("dgvm.dashboard")

ROUTES_MODULE = "dgvm.dashboard.routes"
ROUTES_KEY = "distributed.scheduler.http.routes"


def register() -> None:
    """List the dashboard's routes module for schedulers this process starts from now.
    Idempotent. When distributed's dashboard is imported already, list the pages there
    too: that survives a later reset of dask.config, which would drop the route."""
    routes = list(dask.config.get(ROUTES_KEY, default=[]) or [])
    if ROUTES_MODULE not in routes:
        dask.config.set({ROUTES_KEY: [*routes, ROUTES_MODULE]})
    if "distributed.dashboard.scheduler" in sys.modules:
        from dgvm.dashboard import pages  # Bokeh: optional, as for distributed's dashboard

        pages.add_to_distributed()


def install(scheduler, plugin):
    """Serve ``plugin``'s GVAT on ``scheduler``'s dashboard, JSON API and ``/metrics``."""
    source = DashboardSource(scheduler, plugin)
    scheduler.extensions[EXTENSION] = source
    metrics.register(source)
    register()  # again, for schedulers this process starts later (a config reset drops it)
    http = getattr(scheduler, "http_application", None)
    if http is not None:
        try:
            _add_routes(scheduler, http)
            _add_pages(scheduler, http)
        except Exception:  # the GVAT works without its dashboard: say so, carry on
            logger.exception("could not add the dgvm dashboard to the scheduler's HTTP server")
    return source


def _bokeh_apps(http) -> list:
    try:
        from bokeh.server.tornado import BokehTornado  # optional, as for distributed's dashboard
    except ImportError:
        return []
    return [a for a in http.applications if isinstance(a, BokehTornado)]


def _prefix(http) -> str:
    """The dashboard's URL prefix, ending in "/" (distributed does not keep it)."""
    apps = _bokeh_apps(http)
    if apps:
        return apps[0].prefix.rstrip("/") + "/"
    for rule in http.wildcard_router.rules:  # distributed's own /health route, prefixed
        pattern = getattr(getattr(rule.matcher, "regex", None), "pattern", "")
        if pattern.endswith("health$"):
            return pattern[: -len("health$")]
    return "/"


def _routed(http, path: str, handler_class) -> bool:
    """Whether a GET of ``path`` reaches ``handler_class``."""
    request = HTTPServerRequest(method="GET", uri=path, headers=HTTPHeaders({"Host": "localhost"}))
    return getattr(http.find_handler(request), "handler_class", None) is handler_class


def _add_routes(scheduler, http) -> None:
    prefix = _prefix(http)
    url, cls, _ = api.routes[0]
    if _routed(http, prefix + url, cls):
        return
    http.add_handlers(r".*$", [
        (prefix + url, cls, {**kwargs, "dask_server": scheduler}) for url, cls, kwargs in api.routes
    ])


def _add_pages(scheduler, http) -> None:
    apps = _bokeh_apps(http)
    if not apps:
        return  # the scheduler serves no dashboard
    # Bokeh is there (apps): the pages and distributed's dashboard can be loaded.
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import template_variables

    from dgvm.dashboard import pages

    if any(set(pages.APPLICATIONS) & a.app_paths for a in apps):
        return  # distributed built them (register ran before this scheduler started)

    variables = template_variables(scheduler)  # memoized: the dict the pages render with
    app = BokehApplication(pages.APPLICATIONS, scheduler, prefix=apps[0].prefix,
                           template_variables=variables)
    http.add_application(app)
    app.initialize(IOLoop.current())
    app.start()
    plots = variables["plots"]  # the "More..." menu, shared by every page's template
    for url in pages.APPLICATIONS:
        entry = pages.menu_entry(url)
        if entry not in plots:
            plots.append(entry)
    plots.sort(key=lambda d: d["name"])
