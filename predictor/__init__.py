"""Engine (load models, predict, decide), rules layer, capacity, preemption, cluster adapters, trace
replay, state store and the ``predictor`` command line. Imports ``features`` and ``models``."""
