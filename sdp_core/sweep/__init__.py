"""Sweeps: Ray Tune + Optuna over trial configs under a fixed ε target (`sdp-sweep run` / `sdp-sweep resume`).

`space` turns a search space into Optuna's define-by-run sampling, `driver` runs the Tune experiment, `store` is
the output folder the report reads, `live` the live table, `jobs` the Ray connection, `cli` the two commands.
Ray is imported only by `driver`, `live` and `jobs.connect_ray`, so `cli` and `space` load without it.
"""
