"""`bsp-planner simulate`: an experiment assembled into a scenario, every strategy run over it by the step loop
with the simulated executor (durations charged from tables), in parallel processes, and the comparison report."""
