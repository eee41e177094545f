"""`bsp-planner profile ...` (placeholder until the profiler lands)."""

import typer

app = typer.Typer(help="Measure task durations over a grid of CPU limits x workload sizes.", no_args_is_help=True)
