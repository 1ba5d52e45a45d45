"""The dashboard on live clusters: its JSON API agrees with dgvm.table/workers/stats, its
Prometheus metrics with the GVAT (counters only grow), its pages render with data (in
Bokeh's own client, and in a real headless Chromium), on a cluster that had dgvm from the
start and on one that got it late; the operations the workers ran appear in the JSON, the
operations panel and /metrics. A gpu test checks both GPUs' memory in the JSON."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import dask
import distributed
import numpy as np
import pytest

import dgvm
import dgvm.array as dnp
from dgvm.backends.cuda import gpu_count
from dgvm.dashboard import mount, pages
from dgvm.dashboard.operations import MAXLEN, Operations, operation_name
from dgvm.dashboard.panels.common import short
from dgvm.protocol import messages

from test_kernels import axpy, copy2d, fails, spread_and_gather

MiB = 2**20
API = "dgvm/api/v1/"
CHROMIUM = os.environ.get("DGVM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DGVM_CHROMEDRIVER", "/usr/bin/chromedriver")


# -- helpers ---------------------------------------------------------------------------
def http_base(client) -> str:
    """The scheduler's HTTP server (dashboard, JSON, /metrics), as a URL ending in "/"."""
    host = client.scheduler.address.split("://")[-1].rsplit(":", 1)[0]
    return f"http://{host}:{client.scheduler_info()['services']['dashboard']}/"


def get(base: str, path: str) -> str:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()


def get_json(base: str, path: str) -> dict:
    return json.loads(get(base, path))


def wait_for(check, timeout: float = 10.0, what: str = "condition"):
    """Poll ``check`` until it returns something true (heartbeats carry worker counters)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def scrape(base: str) -> dict:
    """/metrics as {(sample name, frozenset of labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(get(base, "metrics"))
        for s in fam.samples
    }


def metric(samples: dict, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def stats_as_json(s: dict) -> dict:
    return json.loads(json.dumps({"workers": s["workers"],
                                  "allocations": {str(k): v for k, v in s["allocations"].items()}}))


def dashboard_cluster():
    """Three cpu workers of mixed sizes and speeds, as conftest's, with the dashboard on."""
    return dgvm.LocalCluster(
        n_workers=3, backend="cpu", device_memory=[64 * MiB, 128 * MiB, 256 * MiB],
        device_speed=[1.0, 2.0, 4.0], processes=False, dashboard_address="127.0.0.1:0",
    )


def pull_document(base: str, page: str, **arguments):
    """A session of the page through Bokeh's own client (``.document``: as the server
    built and filled it); use it as a context manager."""
    from bokeh.client import pull_session

    return pull_session(url=base + page, arguments={k: str(v) for k, v in arguments.items()})


# -- registration ----------------------------------------------------------------------
def test_register_lists_routes_and_pages_for_distributed(monkeypatch):
    from distributed.dashboard import scheduler as dashboard

    for url in pages.APPLICATIONS:
        monkeypatch.delitem(dashboard.applications, url, raising=False)
    routes = [r for r in dask.config.get(mount.ROUTES_KEY) if r != mount.ROUTES_MODULE]
    with dask.config.set({mount.ROUTES_KEY: routes}):
        mount.register()
        mount.register()  # idempotent
        assert dask.config.get(mount.ROUTES_KEY) == [*routes, mount.ROUTES_MODULE]
    for url in ("/individual-dgvm", "/individual-dgvm-memory", "/individual-dgvm-migration"):
        assert dashboard.applications[url] is pages.APPLICATIONS[url]
    assert pages.menu_entry("/individual-dgvm-memory") == {"url": "individual-dgvm-memory", "name": "Dgvm Memory"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scheduler_preload_serves_pages_and_json(tmp_path):
    """``dask scheduler --preload dgvm.scheduler`` in a fresh process (with a dashboard
    prefix): distributed builds the pages into its own dashboard (so JupyterLab lists
    them) and mounts the JSON API and metrics under the prefix."""
    port = free_port()
    log = open(tmp_path / "scheduler.log", "w")
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "dask"), "scheduler", "--preload", "dgvm.scheduler",
         "--host", "127.0.0.1", "--port", "0", "--dashboard-address", f"127.0.0.1:{port}",
         "--dashboard-prefix", "/pre"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/pre/"
    try:
        def up():
            assert proc.poll() is None, (tmp_path / "scheduler.log").read_text()
            try:
                return get_json(base, API + "workers")
            except (urllib.error.URLError, ConnectionError):
                return None
        body = wait_for(up, 30, "the scheduler's HTTP server")
        assert body["version"] == 1 and body["workers"] == []
        listed = get_json(base, "individual-plots.json")
        assert {"/individual-dgvm", "/individual-dgvm-memory", "/individual-dgvm-migration",
                "/individual-dgvm-operations"} <= set(listed.values())
        assert get_json(base, API + "operations")["operations"] == []
        assert 'href="individual-dgvm"' in get(base, "status")
        assert "dgvm_allocations 0.0" in get(base, "metrics")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_totals_never_go_down_when_workers_leave_or_restart():
    from dgvm.dashboard.counters import Totals, nest

    t = Totals()
    a = {"hits": 5, "misses": 2, "paths": {"shm": {"count": 2, "bytes": 100, "seconds": 0.1}}}
    b = {"hits": 1, "misses": 1, "paths": {}}
    first = nest(t.update({("A", 1): a, ("B", 2): b}))
    assert (first["hits"], first["misses"], first["paths"]["shm"]["bytes"]) == (6, 3, 100)
    gone = nest(t.update({("B", 2): b}))  # A left: what it reported stays counted
    assert (gone["hits"], gone["paths"]["shm"]["bytes"]) == (6, 100)
    restarted = nest(t.update({("B", 2): {"hits": 0, "misses": 0, "paths": {}}}))  # counters reset
    assert (restarted["hits"], restarted["misses"]) == (6, 3)
    grown = nest(t.update({("B", 2): {"hits": 4, "misses": 0, "paths": {}}}))
    assert grown["hits"] == 10


def test_counters_of_a_heartbeat_and_a_launch_report_keep_the_later_of_each():
    from dgvm.dashboard.counters import latest

    beat = {"hits": 5, "misses": 0, "left_running": 1, "paths": {}}  # taken before the task
    report = {"hits": 6, "misses": 10, "paths": {"shm": {"count": 10, "bytes": 100}}}
    both = {"hits": 6, "misses": 10, "left_running": 1, "paths": {"shm": {"count": 10, "bytes": 100}}}
    assert latest(beat, report) == latest(report, beat) == both  # in either order
    older = {"hits": 6, "misses": 4, "paths": {"shm": {"count": 4, "bytes": 40}}}
    assert latest(both, older) == both  # an earlier report handed over late


# -- JSON ------------------------------------------------------------------------------
def test_json_api_agrees_with_lookup(case):
    x = dnp.from_numpy(np.arange(4096.0).reshape(64, 64), chunks=(16, 32), placement="round_robin")
    buf = dgvm.malloc(3 * MiB, chunk_bytes=MiB)
    base = http_base(case.client)
    try:
        body = get_json(base, API + "allocations")
        assert body["version"] == 1 and body["time"] > 0
        assert [dgvm.AllocationInfo.from_dict(r) for r in body["allocations"]] == dgvm.table()
        row = {r["alloc_id"]: r for r in body["allocations"]}[x.alloc_id]
        chunks = dgvm.table(x.alloc_id, chunks=True)[0].chunks
        per_worker: dict = {}
        for c in chunks:
            per_worker[c.worker] = per_worker.get(c.worker, 0) + c.nbytes
        assert row["workers"] == sorted(per_worker) and row["by_worker"] == per_worker
        assert row["replicas"] == 0 and row["lost_chunks"] == 0

        one = get_json(base, API + f"allocations?alloc_id={x.alloc_id}&chunks=1")["allocations"]
        assert [dgvm.AllocationInfo.from_dict(r) for r in one] == dgvm.table(x.alloc_id, chunks=True)

        rows = get_json(base, API + "workers")["workers"]
        infos = dgvm.workers()
        if case.backend == "cuda":  # memGetInfo moves with other processes: compare the rest
            strip = lambda w: {k: v for k, v in w.to_dict().items() if k not in ("free", "other_used")}  # noqa: E731
            assert [strip(dgvm.WorkerInfo.from_dict(r)) for r in rows] == [strip(w) for w in infos]
        else:
            assert [dgvm.WorkerInfo.from_dict(r) for r in rows] == infos
        for r in rows:
            assert r["home_bytes"] + r["replica_bytes"] == r["used"]
            assert r["home_bytes"] == sum(r["by_allocation"].values()) == sum(r["by_owner"].values())
            assert r["by_allocation"].get(str(x.alloc_id), 0) == per_worker.get(r["address"], 0)
            assert r["tier"] == "device" and r["device_total"] >= r["capacity"] and r["device_free"] >= 0
        assert {r["address"] for r in get_json(base, API + "workers?include_lost=1")["workers"]} >= {
            r["address"] for r in rows}

        # worker counters arrive with heartbeats: the same as dgvm.stats() once they did
        def same_stats():
            body = get_json(base, API + "stats")
            return {k: body[k] for k in ("workers", "allocations")} == stats_as_json(dgvm.stats()) and body
        stats = wait_for(same_stats, what="/stats to equal dgvm.stats()")
        assert set(stats["totals"]["paths"]) >= {"shm", "comm"}
    finally:
        x.free()
        buf.free()
    with pytest.raises(urllib.error.HTTPError) as e:
        get(base, API + f"allocations?alloc_id={x.alloc_id}")
    assert e.value.code == 404 and "already freed" in e.value.read().decode()


# -- Prometheus ------------------------------------------------------------------------
def test_prometheus_metrics_follow_the_gvat(case):
    n = len(case.capacities)
    base = http_base(case.client)
    before = scrape(base)
    assert ("dask_scheduler_clients", frozenset()) in before  # distributed's own /metrics
    x, out = spread_and_gather(8 * n, 8)
    try:
        m = scrape(base)
        table = dgvm.table()
        assert metric(m, "dgvm_allocations") == len(table) == 2
        assert metric(m, "dgvm_allocated_bytes") == sum(a.nbytes for a in table)
        assert metric(m, "dgvm_workers") == n
        for w in dgvm.workers():
            states = {s: metric(m, "dgvm_device_bytes", worker=w.address, device=w.device, state=s)
                      for s in ("home", "replica", "other", "free")}
            assert states["home"] + states["replica"] == w.used
            assert sum(states.values()) == w.capacity
            assert metric(m, "dgvm_device_capacity_bytes", worker=w.address, device=w.device) == w.capacity

        for _ in range(3):  # remote reads: misses, replicas over shm; the third re-homes x
            dgvm.launch(axpy, 1.0, x, x, out=out)
        dgvm.wait(out)
        s = dgvm.stats()["allocations"][x.alloc_id]
        assert s["misses"] > 0 and s["rehomes"] > 0

        def grown():
            now = scrape(base)
            return all(total(now, k) > total(before, k) for k in (
                "dgvm_chunk_misses_total", "dgvm_chunk_hits_total", "dgvm_migrations_total",
                "dgvm_migration_bytes_total", "dgvm_rehomes_total")) and now
        after = wait_for(grown, what="counters to grow after remote reads")
        path = "cuda_ipc" if case.backend == "cuda" else "shm"
        assert metric(after, "dgvm_migrations_total", path=path) > metric(before, "dgvm_migrations_total", path=path)
    finally:
        x.free()
        out.free()
    final = scrape(base)
    assert metric(final, "dgvm_allocations") == 0 and metric(final, "dgvm_allocated_bytes") == 0
    for (name, labels), v in after.items():  # counters never go down
        if name.startswith("dgvm_") and name.endswith("_total"):
            assert final[(name, labels)] >= v


# -- pages -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dashboard():
    cluster = dashboard_cluster()
    client = dgvm.connect(cluster)
    try:
        yield client, http_base(client)
    finally:
        client.close()
        cluster.close()


@contextlib.contextmanager
def dashboard_arrays(client):
    """x: 24 blocks over the workers, 10 with replicas where out (all on one worker) read
    them; a byte buffer beside them; and the cluster's misses before the launch (the
    totals are the module cluster's since it started: other tests count in them too).

    ``client`` is made current while they live: the newest client is Dask's default, and
    in some orders that is the ``case`` fixture's (made after this module's dashboard
    cluster): without this the arrays, and ``dgvm.table()`` and ``dgvm.stats()`` in the
    test, went to that other cluster, and the pages showed an empty GVAT."""
    with client.as_current():
        misses_before = sum(w["misses"] for w in dgvm.stats(client=client)["workers"].values())
        x = dnp.from_numpy(np.arange(2048 * 3072.0).reshape(2048, 3072), chunks=(512, 512), client=client)
        out = dnp.zeros(x.shape, chunks=(512, 512), placement="packed", client=client)
        buf = dgvm.malloc(40 * MiB, chunk_bytes=8 * MiB, placement="round_robin", client=client)
        try:
            dgvm.launch(copy2d, x, out=out)
            dgvm.wait(out)
            yield x, out, buf, misses_before
        finally:
            for a in (x, out, buf):
                a.free()


@pytest.fixture
def arrays(dashboard):
    """``dashboard_arrays``, once they have settled (younger ones are not the GVAT table's rows)."""
    from dgvm.dashboard.panels.common import SETTLE_SECONDS

    client, _ = dashboard
    with dashboard_arrays(client) as made:
        newest = max(a.created for a in dgvm.table(client=client))
        wait_for(lambda: time.time() > newest + SETTLE_SECONDS, what="the arrays to settle")
        yield made


def test_arrays_live_on_the_dashboard_cluster_whichever_client_is_newest(dashboard):
    """The pages' arrays go to the dashboard's cluster also when another cluster's client
    was made after it and is Dask's default (the module cluster of the ``case`` tests,
    when random order runs one of them between the page tests)."""
    client, base = dashboard
    other = dgvm.LocalCluster(n_workers=1, backend="cpu", device_memory=[256 * MiB],
                              processes=False, dashboard_address=None)
    newer = dgvm.connect(other)
    try:
        assert distributed.default_client() is newer
        with dashboard_arrays(client) as (x, out, buf, _):
            listed = {a["alloc_id"] for a in get_json(base, API + "allocations")["allocations"]}
            assert {x.alloc_id, out.alloc_id, buf.alloc_id} <= listed
            assert not dgvm.table(client=newer)
    finally:
        newer.close()
        other.close()


def test_pages_in_the_dashboard_menu_and_documents(dashboard, arrays):
    client, base = dashboard
    x, out, buf, misses_before = arrays
    status = get(base, "status")
    for url in pages.APPLICATIONS:
        assert f'href="{url.strip("/")}"' in status  # the "More..." menu of every page
    listed = get_json(base, "individual-plots.json")  # JupyterLab's list of panels
    assert "/individual-dgvm-memory" in listed.values() and "/individual-dgvm-migration" in listed.values()

    homes = {c.worker for c in dgvm.table(x.alloc_id, chunks=True)[0].chunks}
    with pull_document(base, "individual-dgvm", alloc=x.alloc_id) as session:
        doc = session.document
        cells = doc.get_model_by_name("dgvm-chunks").data
        assert len(cells["index"]) == x.alloc.nchunks == 24
        assert {w for w in cells["worker"]} == {short(w) for w in homes}
        replicas = doc.get_model_by_name("dgvm-replicas").data
        assert len(replicas["x"]) == dgvm.stats()["allocations"][x.alloc_id]["replicas"] > 0
        assert len(doc.get_model_by_name("dgvm-gvat").data["alloc_id"]) == 3
        keys = set(doc.get_model_by_name("dgvm-memory").data["key"])
        assert keys == {f"allocation {a.alloc_id}" for a in (x, out, buf)} | {"replicas"}
    with pull_document(base, "individual-dgvm-migration") as session:
        text = session.document.get_model_by_name("dgvm-migration-totals").text
        assert f"misses</b> {misses_before + 10}" in text and "shm" in text


def _panels_at(dask_scheduler, now: float, wanted: int | None = None, pick: int | None = None) -> dict:
    """On the scheduler's loop: the GVAT table, chunk map and memory panels updated from a
    snapshot taken now but dated ``now`` (so that which allocations have settled does not
    depend on how fast this machine is); what they would send to the browser. ``pick``:
    an allocation chosen in the chunk map's selector (as from the browser) after the first
    update, then a second update."""
    from dataclasses import replace

    from dgvm.dashboard.panels import ChunkMapPanel, GVATPanel, MemoryPanel
    from dgvm.dashboard.source import DashboardSource

    source = DashboardSource.of(dask_scheduler)
    snap = replace(source.snapshot(), time=now)
    gvat, chunks, memory = GVATPanel(), ChunkMapPanel(source.plugin.gvat, wanted), MemoryPanel()
    for panel in (gvat, chunks, memory):
        panel.update(snap)
    if pick is not None:
        chunks.select.value = str(pick)
        chunks.update(snap)
    return {
        "rows": list(gvat.source.data["alloc_id"]), "young": gvat.young.text,
        "options": [v for v, _ in chunks.select.options], "selected": chunks.select.value,
        "summary": chunks.summary.text, "cells": len(chunks.source.data["index"]),
        "memory": sorted(set(memory.source.data["key"])),
    }


def test_short_lived_allocations_are_counted_apart_and_the_chunk_map_shows_the_largest(dashboard):
    """The temporaries of a loop (young allocations) are one line under the GVAT table and
    one key of the memory bars, not a row each; the chunk map shows the largest settled
    allocation unless the URL names one, and says so when that one is not there."""
    from dgvm.dashboard.panels.common import SETTLE_SECONDS

    client, _ = dashboard
    with client.as_current():
        one = dnp.zeros((8, 8), client=client)  # 1 chunk, on 1 worker
        big = dnp.zeros((1024, 1024), chunks=(256, 1024), client=client)  # 8 MiB, the largest settled
        created = {a.alloc_id: a.created for a in dgvm.table(client=client)}
        wait_for(lambda: time.time() > created[big.alloc_id] + 0.5, what="half a second to pass")
        temps = [dnp.zeros((2048, 1024), client=client) for _ in range(3)]  # 16 MiB each: larger
        try:
            # dated so that one and big have settled and the temporaries have not
            now = max(created.values()) + SETTLE_SECONDS + 0.1
            seen = client.run_on_scheduler(_panels_at, now=now)
            assert seen["rows"] == [one.alloc_id, big.alloc_id]
            assert "3 allocations younger than 2 s" in seen["young"] and "48.00 MiB" in seen["young"]
            assert seen["selected"] == str(big.alloc_id) and seen["cells"] == 4
            assert seen["options"] == [str(one.alloc_id), str(big.alloc_id)]
            assert seen["memory"] == sorted([f"allocation {one.alloc_id}", f"allocation {big.alloc_id}",
                                             "new allocations"])

            asked = client.run_on_scheduler(_panels_at, now=now, wanted=temps[0].alloc_id)
            assert asked["selected"] == str(temps[0].alloc_id) and asked["cells"] == temps[0].alloc.nchunks
            gone = client.run_on_scheduler(_panels_at, now=now, wanted=10**6)
            assert gone["selected"] == str(big.alloc_id)
            assert "allocation 1000000 (asked in the URL) is not in the GVAT" in gone["summary"]

            picked = client.run_on_scheduler(_panels_at, now=now, pick=one.alloc_id)
            assert picked["selected"] == str(one.alloc_id) and picked["cells"] == 1  # not the default

            single = client.run_on_scheduler(_panels_at, now=now, wanted=one.alloc_id)["summary"]
            assert "<span id='dgvm-nchunks'>1</span> chunk on <span id='dgvm-nworkers'>1</span> worker" in single
        finally:
            for a in (one, big, *temps):
                a.free()


def test_migration_totals_say_1_chunk():
    from dgvm.dashboard.counters import Rates
    from dgvm.dashboard.panels import MigrationPanel
    from dgvm.dashboard.snapshot import Snapshot

    totals = {"hits": 1, "misses": 1, "rehomes": 0, "evicted": 0, "transient": 0, "left_running": 0,
              "gathered": 3, "ahead": 5,
              "paths": {"shm": {"count": 1, "bytes": 100, "seconds": 0.1}, "comm": {"count": 2, "bytes": 200}}}
    panel = MigrationPanel(Rates(10, every=0.5))
    panel.update(Snapshot(time=1.0, allocations=[], workers=[], stats={}, totals=totals))
    assert "shm 100 B in 1 chunk, comm 200 B in 2 chunks" in panel.totals.text
    assert "gathered regions</b> 3" in panel.totals.text and "pieces asked ahead</b> 5" in panel.totals.text


def _browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(f"no Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER}): "
                    "apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size={},{}".format(*WINDOW)):
        options.add_argument(arg)
    profile = tempfile.mkdtemp(prefix="dgvm-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver, profile


# Read in the page: the named data sources, and whether every root view has rendered.
RENDERED = """
if (!window.Bokeh || !Bokeh.documents || !Bokeh.documents.length) return null;
const doc = Bokeh.documents[0];
const data = (name) => { const m = doc.get_model_by_name(name); return m ? m.data : null; };
const idx = Bokeh.index;
const views = typeof idx.values === "function" ? [...idx.values()] : Object.values(idx);
const out = {idle: doc.is_idle, finished: views.length > 0 && views.every(v => v.has_finished())};
for (const name of arguments[0]) {
  const d = data(name);
  out[name] = d ? Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Array.from(v)])) : null;
}
return out;
"""


def render(driver, url: str, names: list[str], ready, timeout: float = 30.0) -> dict:
    driver.get(url)
    return wait_for(lambda: (lambda s: s if s and s["idle"] and s["finished"] and ready(s) else None)(
        driver.execute_script(RENDERED, names)), timeout, f"{url} to render with data")


# Texts the browser shows cut: table cells and headers wider than their column, plot
# titles wider than their plot's frame (the title starts at the frame's left edge).
CUT = """
function* walk(v) { yield v; if (typeof v.children === "function") for (const c of v.children()) yield* walk(c); }
const ctx = document.createElement("canvas").getContext("2d");
const cut = [];
const roots = typeof Bokeh.index.values === "function" ? [...Bokeh.index.values()] : Object.values(Bokeh.index);
for (const root of roots) for (const v of walk(root)) {
  const m = v.model;
  if (v.shadow_el && v.shadow_el.querySelector(".slick-header")) {
    for (const c of v.shadow_el.querySelectorAll(".slick-cell"))
      if (c.scrollWidth > c.clientWidth) cut.push(["cell", c.textContent, c.scrollWidth, c.clientWidth]);
    for (const h of v.shadow_el.querySelectorAll(".slick-header-column")) {
      const name = h.querySelector(".slick-column-name"), st = getComputedStyle(h);
      const room = h.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
      if (name && name.scrollWidth > room) cut.push(["header", name.textContent, name.scrollWidth, room]);
    }
  }
  const t = m.title;
  if (t && typeof t === "object" && typeof t.text === "string" && t.text && v.frame) {
    ctx.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
    const w = ctx.measureText(t.text).width;
    if (w > v.frame.bbox.width) cut.push(["title", t.text, w, v.frame.bbox.width]);
  }
}
return cut;
"""

# Per plot: its title and rendered height; and the window's height.
HEIGHTS = """
function* walk(v) { yield v; if (typeof v.children === "function") for (const c of v.children()) yield* walk(c); }
const roots = typeof Bokeh.index.values === "function" ? [...Bokeh.index.values()] : Object.values(Bokeh.index);
const plots = {};
for (const root of roots) for (const v of walk(root))
  if (v.frame && v.model.title && typeof v.model.title.text === "string") plots[v.model.title.text] = v.bbox.height;
return {window: window.innerHeight, plots};
"""

# The Devices table's load cells as drawn, and the load column of the data the "Queued
# work" bars draw (the same source).
LOADS = """
function* walk(v) { yield v; if (typeof v.children === "function") for (const c of v.children()) yield* walk(c); }
const roots = typeof Bokeh.index.values === "function" ? [...Bokeh.index.values()] : Object.values(Bokeh.index);
for (const root of roots) for (const v of walk(root)) {
  if (!v.shadow_el || !v.shadow_el.querySelector(".slick-header") || v.model.source.name !== "dgvm-workers") continue;
  const col = v.model.columns.filter(c => c.visible).findIndex(c => c.field === "load");
  const drawn = [...v.shadow_el.querySelectorAll(".slick-row")].map(r => r.querySelectorAll(".slick-cell")[col].textContent);
  return {drawn, data: Array.from(v.model.source.data.get ? v.model.source.data.get("load") : v.model.source.data.load).map(String)};
}
return null;
"""


WINDOW = (1400, 1760)


def screenshot(driver, tmp_path, name: str, height: int | None = None) -> None:
    """Save the page, in a view ``height`` pixels tall (else the window's), to ``tmp_path``
    and to $DGVM_SCREENSHOT_DIR when set (e.g. docs/); then give the window its size back."""
    shots = [tmp_path / name]
    if os.environ.get("DGVM_SCREENSHOT_DIR"):
        shots.append(os.path.join(os.environ["DGVM_SCREENSHOT_DIR"], name))
    if height is not None:  # the window is taller than the page's view by the browser's bars
        bars = WINDOW[1] - driver.execute_script("return window.innerHeight")
        driver.set_window_size(WINDOW[0], height + bars)
    time.sleep(0.5)  # let the last refresh (and the new size) paint
    try:
        for shot in shots:
            assert driver.save_screenshot(str(shot))
    finally:
        if height is not None:
            driver.set_window_size(*WINDOW)
    assert os.path.getsize(shots[0]) > 10_000  # plots, not a blank page (that is a few kB)


def test_dashboard_in_a_browser(dashboard, arrays, tmp_path):
    """Headless Chromium opens each page of a live cluster, waits until the plots have
    rendered with data, checks what it shows (the chunk map; no text cut; the Devices
    table and its bars showing the same load; plots as tall as their content or their
    window), and saves a screenshot of each page (docs/dashboard*.png, with
    DGVM_SCREENSHOT_DIR=docs)."""
    from selenium.webdriver.common.by import By

    client, base = dashboard
    x, out, buf, _ = arrays
    homes = {short(c.worker) for c in dgvm.table(x.alloc_id, chunks=True)[0].chunks}
    driver, profile = _browser()
    try:
        with client.as_current():  # operations on every worker, for the operations page
            y = x + 1
            y.wait()
            float(y.sum())
            y.free()
        page = render(
            driver, base + f"individual-dgvm?alloc={x.alloc_id}",
            ["dgvm-chunks", "dgvm-replicas", "dgvm-memory", "dgvm-gvat", "dgvm-migration", "dgvm-operations"],
            lambda s: s["dgvm-chunks"] and s["dgvm-chunks"]["index"] and s["dgvm-memory"]["key"]
            and s["dgvm-operations"]["key"]
            and len(s["dgvm-gvat"]["alloc_id"]) == 3
            and len(s["dgvm-migration"]["time"]) >= 3,  # a few refreshes: rates to draw
        )
        cells = page["dgvm-chunks"]
        assert len(cells["index"]) == 24 and set(cells["worker"]) == homes
        assert len(page["dgvm-replicas"]["x"]) == dgvm.stats()["allocations"][x.alloc_id]["replicas"] > 0
        assert sorted(page["dgvm-gvat"]["alloc_id"]) == sorted(a.alloc_id for a in dgvm.table())
        summary = driver.execute_script(  # the Div's text as the browser has it
            "return Bokeh.documents[0].get_model_by_name('dgvm-chunk-summary').text")
        assert "'dgvm-nchunks'>24</span> chunks on" in summary
        assert f"'dgvm-nworkers'>{len(homes)}</span> workers" in summary
        assert driver.find_elements(By.CSS_SELECTOR, ".dropdown-content a[href='individual-dgvm']")
        assert driver.execute_script(CUT) == []

        # queued work on one worker: the table's load (s) reads what the bars draw
        busy = sorted(client.scheduler_info()["workers"])[0]
        client.submit(time.sleep, 0.1, workers=[busy], pure=False).result()  # Dask times the kind
        queued = [client.submit(time.sleep, 0.5, workers=[busy], pure=False) for _ in range(12)]
        try:
            seen = wait_for(lambda: (lambda s: s if s and any(float(v) > 0 for v in s["data"])
                                     and s["drawn"] == s["data"] else None)(driver.execute_script(LOADS)),
                            30, "the table's load to show the queued work the bars show")
            assert len(seen["drawn"]) == 3
            screenshot(driver, tmp_path, "dashboard.png")
        finally:
            distributed.wait(queued)

        render(driver, base + "individual-dgvm-memory", ["dgvm-memory", "dgvm-capacity"],
               lambda s: len(s["dgvm-capacity"]["worker"]) == 3 and s["dgvm-memory"]["key"])
        heights = driver.execute_script(HEIGHTS)
        # three bars and their legend, not the window's 1760 pixels
        assert heights["plots"]["Device memory per worker"] < 400, heights
        assert driver.execute_script(CUT) == []
        screenshot(driver, tmp_path, "dashboard-memory.png", height=290)

        render(driver, base + "individual-dgvm-migration", ["dgvm-migration"],
               lambda s: len(s["dgvm-migration"]["time"]) >= 1)
        heights = driver.execute_script(HEIGHTS)
        assert all(h > 0.6 * heights["window"] for h in heights["plots"].values()), heights  # the window, not its top
        assert driver.execute_script(CUT) == []
        screenshot(driver, tmp_path, "dashboard-migration.png", height=520)

        render(driver, base + f"individual-dgvm-chunks?alloc={x.alloc_id}", ["dgvm-chunks"],
               lambda s: len(s["dgvm-chunks"]["index"]) == 24)
        assert driver.execute_script(CUT) == []
        screenshot(driver, tmp_path, "dashboard-chunks.png", height=640)

        # the workers' tasks of the launch that made out, the addition and the sum (and of
        # earlier tests on this cluster)
        render(driver, base + "individual-dgvm-operations", ["dgvm-operations"],
               lambda s: {"launch-copy2d", "sum"} <= set(s["dgvm-operations"]["name"]))
        heights = driver.execute_script(HEIGHTS)
        assert all(h > 0.6 * heights["window"] for h in heights["plots"].values()), heights  # fills it
        assert driver.execute_script(CUT) == []
        screenshot(driver, tmp_path, "dashboard-operations.png", height=360)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# -- operations ------------------------------------------------------------------------
class EventLog:
    """A scheduler's log of the operations topic, as ``Scheduler.get_events`` answers it."""

    def __init__(self, maxlen: int):
        self.events: collections.deque = collections.deque(maxlen=maxlen)

    def log(self, key: str, worker: str = "tcp://127.0.0.1:1", status: str = "finished",
            start: float = 10.0, stop: float = 10.5, chunks: int = 2) -> None:
        self.events.append((time.time(), {"key": key, "worker": worker, "start": start, "stop": stop,
                                          "status": status, "chunks": chunks}))

    def get_events(self, topic: str) -> tuple:
        assert topic == messages.OPERATIONS_TOPIC
        return tuple(self.events)


def test_operation_names_drop_the_prefix_and_the_random_suffix():
    assert operation_name("dgvm-add-1a2b3c4d5e") == "add"
    assert operation_name("dgvm-fused3-add-1a2b3c4d5e") == "fused3-add"
    assert operation_name("dgvm-launch-axpy-commit-1a2b3c4d5e") == "launch-axpy-commit"


def test_operations_are_read_once_newest_last_and_bounded():
    log = EventLog(maxlen=5)
    ops = Operations(log, maxlen=4)
    ops.sync()
    assert ops.added == 0 and ops.since(0) == []
    keys = [f"dgvm-add-{i:010x}" for i in range(10)]
    for i in range(3):
        log.log(keys[i], status="error" if i == 1 else "finished", start=i, stop=i + 0.25)
    ops.sync()
    ops.sync()  # nothing new: nothing read twice
    assert [r["key"] for r in ops.since(0)] == keys[:3] and ops.since(3) == []
    assert ops.statuses == {"finished": 2, "error": 1}
    assert ops.rows[0] == {"key": keys[0], "name": "add", "worker": "tcp://127.0.0.1:1", "start": 0.0,
                           "stop": 0.25, "duration": 0.25, "status": "finished", "chunks": 2}
    # 7 between two reads, more than the log keeps (5): its 5 are read, the last 4 kept
    for i in range(3, 10):
        log.log(keys[i])
    ops.sync()
    assert ops.added == 8 and [r["key"] for r in ops.rows] == keys[6:]
    assert [r["key"] for r in ops.since(6)] == keys[8:]
    assert ops.statuses == {"finished": 7, "error": 1}


def test_operations_panel_streams_only_new_tasks_a_row_per_worker_and_clears_after_a_pause():
    from dgvm.dashboard.panels import OperationsPanel
    from dgvm.dashboard.panels.operations import CLEAR_AFTER_MS, ERROR_FILL, ERROR_LINE, operation_color

    log = EventLog(maxlen=3 * MAXLEN)
    panel = OperationsPanel(Operations(log))
    a, b = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"
    log.log("dgvm-add-0000000001", worker=a, start=1.0, stop=1.5, chunks=3)
    log.log("dgvm-sum-0000000002", worker=b, status="error", start=2.0, stop=2.25)
    panel.update()
    data = panel.source.data
    assert list(data["key"]) == ["dgvm-add-0000000001", "dgvm-sum-0000000002"]
    assert list(data["worker"]) == [short(a), short(b)] and list(data["address"]) == [a, b]
    assert list(data["left"]) == [1000.0, 2000.0] and list(data["right"]) == [1500.0, 2250.0]
    assert list(data["color"]) == [operation_color("add"), ERROR_FILL]
    assert list(data["line"]) == [operation_color("add"), ERROR_LINE]
    assert list(data["status"]) == ["finished", "error"] and list(data["chunks"]) == [3, 2]
    assert list(data["label"]) == ["add", "error"]  # the legend's entries
    assert operation_color("add") not in (ERROR_FILL, ERROR_LINE)
    assert list(panel.figure.y_range.factors) == [short(b), short(a)]  # the first worker at the top
    assert "<b>operations</b> 2 · <b>errors</b> 1" in panel.summary.text

    panel.update()  # nothing new
    assert len(panel.source.data["key"]) == 2
    # a row per worker: the plot grows with them (not on the small page, which fills its window)
    workers = [f"tcp://127.0.0.1:{100 + i}" for i in range(12)]
    for i in range(MAXLEN + 500):
        log.log(f"dgvm-add-{i:010x}", worker=workers[i % 12], start=3.0 + i / 100, stop=3.5 + i / 100)
    panel.update()
    keys = panel.source.data["key"]
    assert len(keys) == MAXLEN and keys[-1] == f"dgvm-add-{MAXLEN + 499:010x}"  # the last ones, bounded
    assert len(panel.figure.y_range.factors) == 14 and panel.figure.height > 240
    assert f"drawn: {MAXLEN} tasks" in panel.summary.text
    # tasks after a pause (as Dask's task stream): drawn alone, the plot spans them
    later = 3.5 + (MAXLEN + 499) / 100 + CLEAR_AFTER_MS / 1000 + 1
    log.log("dgvm-sum-0000000003", worker=b, start=later, stop=later + 0.5)
    panel.update()
    assert list(panel.source.data["key"]) == ["dgvm-sum-0000000003"]
    assert list(panel.figure.y_range.factors) == [short(b)] and "drawn: 1 task" in panel.summary.text
    log.log("dgvm-sum-0000000004", worker=a, start=later + 1, stop=later + 2)
    panel.update()  # soon after: added to them
    assert list(panel.source.data["key"]) == ["dgvm-sum-0000000003", "dgvm-sum-0000000004"]


def _operation_metrics(dask_scheduler) -> dict:
    """On the scheduler: the ``dgvm_operations`` counter of its dashboard, per status."""
    from dgvm.dashboard.metrics import families
    from dgvm.dashboard.source import DashboardSource

    for fam in families(DashboardSource.of(dask_scheduler)):
        if fam.name == "dgvm_operations":
            return {s.labels["status"]: s.value for s in fam.samples}
    return {}


def test_operations_in_the_json_the_pages_and_metrics(dashboard):
    """x + 1, x.sum() and a launch that fails, on the dashboard's cluster: the workers' tasks
    of each appear in /operations (on the workers that hold the chunks, with their chunks
    and statuses), on the operations pages and in the dgvm_operations counter. Only the
    operations since this test began are looked at: other tests ran on this cluster too."""
    client, base = dashboard
    counted = client.run_on_scheduler(_operation_metrics)
    t0 = time.time()
    with client.as_current():
        x = dnp.from_numpy(np.arange(60.0), chunks=10, placement="round_robin", client=client)
        xi = dnp.from_numpy(np.arange(10, dtype=np.int64), chunks=5, placement="packed", client=client)
        out = dnp.zeros(10, dtype=np.int64, chunks=5, colocate=xi, client=client)
        y = x + 1
        try:
            y.wait()
            assert float(x.sum()) == np.arange(60.0).sum()
            dgvm.launch(fails, xi, out=out)
            with pytest.raises(dgvm.KernelError):
                out.wait()
            out.pending.writes = []  # forget the failed launch
            homes = {a.alloc_id: sorted({c.worker for c in dgvm.table(a.alloc_id, chunks=True)[0].chunks})
                     for a in (x, y, xi)}
        finally:
            for a in (x, y, xi, out):
                a.free()
    assert len(homes[x.alloc_id]) == 3 and len(homes[xi.alloc_id]) == 1

    def by_op(rows: list[dict]) -> dict:
        """The rows of x + 1 (a fused add), x.sum() and the launch, apart."""
        ops: dict = {"add": [], "sum": [], "launch": []}
        for r in rows:
            n = r["name"]
            op = "add" if n.split("-")[-1] == "add" else "launch" if n.startswith("launch-fails") else n
            ops.get(op, []).append(r)
        return ops

    def logged():  # the workers log a task once it answered: the events come a little later
        body = get_json(base, API + f"operations?since={t0}")
        ops = by_op(body["operations"])
        done = (len(ops["add"]) == len(homes[y.alloc_id]) and len(ops["sum"]) == 3
                and any(r["status"] == "error" for r in ops["launch"]))
        return done and (body, ops)

    body, ops = wait_for(logged, what="the operations in /operations")
    assert body["version"] == 1 and body["time"] >= t0
    workers = set(client.scheduler_info()["workers"])
    for r in body["operations"]:
        assert r["stop"] > t0 and r["start"] <= r["stop"] and r["duration"] == r["stop"] - r["start"]
        assert r["worker"] in workers and r["status"] in ("finished", "error")
        assert r["key"].startswith("dgvm-") and r["name"] == operation_name(r["key"])
    # each operation ran where its chunks live, all its chunks, and finished (but the launch)
    assert sorted(r["worker"] for r in ops["add"]) == homes[y.alloc_id]
    assert sorted(r["worker"] for r in ops["sum"]) == homes[x.alloc_id]
    assert sum(r["chunks"] for r in ops["add"]) == sum(r["chunks"] for r in ops["sum"]) == 6
    assert all(r["status"] == "finished" for r in ops["add"] + ops["sum"])
    assert {r["worker"] for r in ops["launch"]} == set(homes[xi.alloc_id])
    assert body["statuses"]["error"] >= 1

    mine = {r["key"]: r for r in body["operations"]}
    everything = get_json(base, API + "operations")["operations"]  # newest last
    assert get_json(base, API + "operations?limit=2")["operations"] == everything[-2:]
    assert get_json(base, API + "operations?limit=0")["operations"] == []
    assert len(everything) <= MAXLEN and set(mine) <= {r["key"] for r in everything}
    for bad in ("limit=x", "since=soon", "limit=-1"):
        with pytest.raises(urllib.error.HTTPError) as e:
            get(base, API + "operations?" + bad)
        assert e.value.code == 400 and bad.split("=")[0] in e.value.read().decode()

    for page in ("individual-dgvm-operations", "individual-dgvm"):
        with pull_document(base, page) as session:
            doc = session.document
            drawn = doc.get_model_by_name("dgvm-operations").data
            rows = {k: (w, s) for k, w, s in zip(drawn["key"], drawn["address"], drawn["status"])}
            assert {k: rows.get(k) for k in mine} == {k: (r["worker"], r["status"]) for k, r in mine.items()}
            factors = doc.get_model_by_name("dgvm-operations-plot").y_range.factors
            assert {short(r["worker"]) for r in mine.values()} <= set(factors)  # a row per worker
            assert "<b>errors</b>" in doc.get_model_by_name("dgvm-operations-summary").text

    now = client.run_on_scheduler(_operation_metrics)  # counters: they only grow, by these at least
    assert now["finished"] - counted.get("finished", 0) >= sum(r["status"] == "finished" for r in mine.values())
    assert now["error"] - counted.get("error", 0) >= sum(r["status"] == "error" for r in mine.values()) >= 1


# -- gpu -------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dgvm_cluster", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)
def test_both_gpus_memory_in_dashboard_json(case):
    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    base = http_base(case.client)
    x = dnp.zeros((4096, 4096), chunks=(1024, 4096), placement="round_robin")  # 4 x 32 MiB
    try:
        rows = get_json(base, API + "workers")["workers"]
        keys = ("address", "device", "name", "capacity", "device_total", "device_free", "home_bytes")
        seen = [{k: r.get(k) for k in keys} for r in rows]
        devices = {r["device"] for r in rows}
        assert len(rows) == len(devices) == 2 and all(d.startswith("cuda:") for d in devices), seen
        for r in rows:
            mine = r["by_allocation"][str(x.alloc_id)]
            assert mine == r["home_bytes"] == 64 * MiB
            assert r["device_total"] >= r["capacity"] > 0
            # the GPU really holds the chunks: used device memory covers them
            assert r["device_total"] - r["device_free"] >= mine
        m = scrape(base)
        for r in rows:
            assert metric(m, "dgvm_device_bytes", worker=r["address"], device=r["device"], state="home") == 64 * MiB
            assert metric(m, "dgvm_device_total_bytes", worker=r["address"], device=r["device"]) == r["device_total"]
    finally:
        x.free()
