"""The ``dgvm`` command: ``dgvm demo``, ``dgvm info [ADDRESS]``, ``dgvm config``, and
``dgvm scheduler`` / ``dgvm worker`` (Dask's CLI with the dgvm preloads, see ``dgvm.deploy.commands``)."""

from __future__ import annotations

import sys

import click

from dgvm import config
from dgvm.cli.demo import run_demo
from dgvm.cli.tables import print_allocations, print_chunk_homes, print_table, print_workers
from dgvm.client import lookup, session
from dgvm.deploy import commands as deploy
from dgvm.protocol import messages
from dgvm.protocol.errors import DgvmError


@click.group()
@click.version_option(package_name="dgvm")
def main():
    """dgvm: a cluster of GPUs as one very large GPU with one address space."""


@main.command()
@click.argument("address")
@click.option("--chunks", is_flag=True, help="also list every chunk")
def info(address, chunks):
    """Print the GVAT and worker inventory of the cluster at ADDRESS."""
    gvat = messages.EXTENSION  # travels with the function
    try:
        client = session.attach(address)
    except DgvmError as e:
        raise click.ClickException(str(e)) from None
    with client:
        if not client.run_on_scheduler(lambda dask_scheduler=None: gvat in dask_scheduler.extensions):
            click.echo(f"the scheduler at {address} has no dgvm GVAT (start it with --preload dgvm.scheduler)")
            sys.exit(1)
        click.echo("workers:")
        print_workers(lookup.workers(include_lost=True, client=client))
        allocs = lookup.table(chunks=chunks, client=client)
        click.echo(f"\nallocations ({len(allocs)}):")
        print_allocations(allocs)
        if chunks:
            for a in allocs:
                click.echo(f"\nallocation {a.alloc_id}:")
                print_chunk_homes(a.chunks)


def _schema_keys(sub: dict, prefix: str = ""):
    """Every option's dotted key, in the schema's order."""
    for k, v in sub.get("properties", {}).items():
        if v.get("type") == "object":
            yield from _schema_keys(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def _show(key: str, value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if key.startswith("address-space.") and isinstance(value, int):
        return f"{value:#x}"
    return str(value)


PASS_ON = dict(ignore_unknown_options=True, allow_extra_args=True, allow_interspersed_args=True)


def _checked(fn, *args):
    """``fn(*args)``; a ``DgvmError`` (a value the schema does not allow, no GPU, no
    dask-cuda) ends the command with its message on stderr and exit status 1."""
    try:
        return fn(*args)
    except DgvmError as e:
        raise click.ClickException(str(e)) from None


def _run(command, dry_run: bool) -> None:
    if dry_run:
        click.echo(command.shell())
        return
    for note in command.notes:
        click.echo(f"dgvm: {note}", err=True)
    click.echo(f"dgvm: running {command.shell()}", err=True)
    command.exec()


@main.command(context_settings=PASS_ON)
@click.option("--port", default=str(deploy.SCHEDULER_PORT), show_default=True, help="scheduler port")
@click.option("--dashboard-address", default=deploy.DASHBOARD_ADDRESS, show_default=True,
              help="dashboard (and dgvm pages) address")
@click.option("--dry-run", is_flag=True, help="print the dask command instead of running it")
@click.argument("dask_args", nargs=-1, type=click.UNPROCESSED, metavar="[DASK_SCHEDULER_ARGS]...")
def scheduler(port, dashboard_address, dry_run, dask_args):
    """Start a Dask scheduler that keeps the GVAT: runs 'dask scheduler --preload
    dgvm.scheduler' with these defaults; every other argument goes to 'dask scheduler'
    (e.g. --host, --scheduler-file, --no-dashboard)."""
    _run(_checked(deploy.scheduler_command, port, dashboard_address, dask_args), dry_run)


@main.command(context_settings=PASS_ON)
@click.option("--backend", default=None,
              help="auto (default: cuda when GPUs are visible and dask-cuda is installed), cuda or cpu")
@click.option("--device-memory", default=None, help="device memory each worker offers, e.g. 2GiB")
@click.option("--device-speed", default=None, type=float, help="relative device speed (cpu emulation)")
@click.option("--nworkers", default=None, type=int, help="cpu: worker processes (default 1); cuda: one per GPU")
@click.option("--nthreads", default=None, type=int, help="threads per worker (default 1)")
@click.option("--dry-run", is_flag=True, help="print the dask command instead of running it")
@click.argument("dask_args", nargs=-1, type=click.UNPROCESSED,
                metavar="[SCHEDULER_ADDRESS] [DASK_WORKER_ARGS]...")
def worker(backend, device_memory, device_speed, nworkers, nthreads, dry_run, dask_args):
    """Start workers that hold chunks: runs 'dask worker SCHEDULER_ADDRESS --preload
    dgvm.worker' on cpu hosts and 'dask cuda worker ...' (one worker per GPU) on GPU hosts;
    every other argument goes to Dask (e.g. --scheduler-file, --memory-limit, --name)."""
    command = _checked(deploy.worker_command, dask_args, backend, device_memory, device_speed, nworkers, nthreads)
    _run(command, dry_run)


@main.command("config")
def show_config():
    """Check this process's dgvm configuration against the schema and print it (key,
    value, environment variable). Exits 1 with the reasons when a value is not allowed."""
    section = _checked(config.validate)
    rows = []
    for key in _schema_keys(config.schema()["properties"]["dgvm"]):
        value = section
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        rows.append([f"dgvm.{key}", _show(key, value), config.env_var(key)])
    print_table(rows, ["key", "value", "environment variable"])


@main.command()
@click.option("--backend", default=None, help="auto (default), cuda or cpu")
@click.option("--workers", "n_workers", type=int, default=None, help="default: one per GPU, or 3 cpu workers")
@click.option("--device-memory", default=None, help="per worker, comma separated (cpu default 256MiB,512MiB,768MiB)")
@click.option("--size", default=None, help="array size (default 1.25x the largest device)")
@click.option("--chunk-bytes", default="32MiB", show_default=True)
@click.option("--keep", is_flag=True, help="keep the cluster and its dashboard up until Ctrl-C")
def demo(backend, n_workers, device_memory, size, chunk_bytes, keep):
    """Start a local cluster, allocate an array larger than any one device, fill and
    check it where it lives, and show where its chunks are."""
    sys.exit(run_demo(backend, n_workers, device_memory, size, chunk_bytes, keep))


if __name__ == "__main__":
    main()
