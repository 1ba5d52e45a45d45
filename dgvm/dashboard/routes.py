"""Imported by distributed while a scheduler builds its HTTP server, because
``dgvm.dashboard.register`` lists this module in ``distributed.scheduler.http.routes``.

Importing it puts dgvm's pages into distributed's dashboard (built right after the routes);
``routes`` are the JSON API's handlers, which distributed mounts under the dashboard's
prefix and hands the scheduler (``dask_server``).
"""

from dgvm.dashboard import api, pages

pages.add_to_distributed()

routes = api.routes
