"""A HELICS co-simulation as bsp-planner tasks: a ring of value federates with a hotspot of work moving
around it (:mod:`.model`), each federate a long-running process task in observe mode (:mod:`.federate`),
its broker a job's service (:mod:`.broker`); :mod:`.local` runs the federation without bsp-planner.
docs/cosim.md explains it; needs the ``cosim`` extra (``pip install 'bsp-planner[cosim]'``)."""
