"""The dashboard joins a scheduler that was serving before the GVAT plugin arrived.

A module of its own: while another scheduler in this process serves Bokeh documents (the
module cluster of ``test_dashboard``), two event loops race on Bokeh's global switch for
property validation (an update callback turns it off while the other loop builds a page),
and Dask's /status fails now and then with 'str' object has no attribute 'text'. Test
modules run one after the other, in any order, so this one never overlaps that cluster.
"""

from __future__ import annotations

import dask

import dgvm
import dgvm.array as dnp
from dgvm.dashboard import mount, pages

from test_dashboard import API, get, get_json, pull_document


def test_pages_added_to_a_dashboard_already_serving(monkeypatch):
    """dgvm.connect to a plain Dask cluster: the plugin arrives after distributed built its
    dashboard; install adds the JSON routes and the pages (and their menu entries)."""
    import distributed
    from distributed.dashboard import scheduler as dashboard

    for url in pages.APPLICATIONS:
        monkeypatch.delitem(dashboard.applications, url, raising=False)
    routes = [r for r in dask.config.get(mount.ROUTES_KEY) if r != mount.ROUTES_MODULE]
    with dask.config.set({mount.ROUTES_KEY: routes}):
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                           dashboard_address="127.0.0.1:0")
    try:
        base = f"http://127.0.0.1:{cluster.scheduler.http_server.port}/"
        assert "individual-dgvm" not in get(base, "status")
        with dgvm.connect(cluster):
            x = dnp.zeros((64, 64), chunks=(32, 32))
            try:
                assert [w["address"] for w in get_json(base, API + "workers")["workers"]] == list(cluster.scheduler.workers)
                assert 'href="individual-dgvm"' in get(base, "status")
                with pull_document(base, "individual-dgvm-chunks") as session:
                    assert len(session.document.get_model_by_name("dgvm-chunks").data["index"]) == 4
            finally:
                x.free()
    finally:
        cluster.close()
