"""Code that runs ON the compute nodes.

Every workload is a plain function ``fn(ctx: TaskContext, **plain_kwargs) -> dataclass`` in a
module that imports neither pytest nor submitit, nor anything of the login side (the session,
the launcher's backend, Slurm queries, the configuration, ``checks``), so it pickles, runs on a
node, and can be tested on a laptop through the CPU/gloo path. What the login node makes of the
results is in ``checks``. ``compute.plan_compute`` and ``training.plan_training`` still read the
profile's settings on the login node (inside the function); tests/unit/test_layer_boundaries.py
holds everything else to this rule.
"""
