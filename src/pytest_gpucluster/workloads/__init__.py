"""Code that runs ON the compute nodes.

Every workload is a plain function ``fn(ctx: TaskContext, **plain_kwargs) -> dataclass`` in a
module that imports neither pytest nor submitit, so it pickles, runs on a node, and can be tested
on a laptop through the CPU/gloo path.
"""
