"""Policy search by replaying the user's own history, trials on Dask (``predictor tune``; docs/tuning.md).

Modules (one concept each): ``windows`` (the train | tune | validate split and its predictions),
``space`` (the searched settings, declared once), ``objectives`` (metrics and directions),
``search`` (Optuna in seeded generations, the Pareto front), ``choice`` (rule *chosen point*),
``dask_replays`` (replays as Dask tasks, each window's data loaded once per worker), ``study``
(the whole study), ``report`` (the files of ``DIR``), ``tracking`` (MLflow).
"""
