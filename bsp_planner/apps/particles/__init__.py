"""Two crowds of particles crossing a periodic 1-D domain split over N ranks (a BSP application).

Every rank owns one slice of the domain and the particles in it. Per superstep it integrates its
particles (short-range repulsion between the ``neighbours`` nearest particles on each side, relaxation
towards the particle's crowd velocity, a seeded random kick) for ``substeps`` inner steps, then hands the
particles that left its slice to the neighbouring ranks through files in a shared folder and waits for
theirs. The two crowds move in opposite directions, so which rank is busy moves with them: the load of
each rank drifts because of the computation itself. A rank's workload is its particle count.

- :mod:`.model`: the physics (pure numpy, no I/O).
- :mod:`.exchange`: the boundary exchange through files (also the ranks' own synchronisation).
- :mod:`.main`: the step loop, as a bsp-planner task (``python -m bsp_planner.apps.particles``).
"""
