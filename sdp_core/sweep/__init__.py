"""Sweeps: Ray Tune + Optuna over trial configs under a fixed ε target (`sdp-sweep run` / `sdp-sweep resume`).

`space` turns a search space into Optuna's define-by-run sampling, `driver` runs the Tune experiment, `prepare`
makes the data its trials share (in a Ray task), `pipeline` detects secrets as a Ray Data pipeline, `store` is the
output folder the report reads, `live` the live table, `jobs` the Ray connection, `cli` the two commands.
Ray is imported only by `driver`, `prepare`, `live`, `jobs.connect_ray` and `pipeline`'s functions, so `cli` and
`space` load without it.
"""
