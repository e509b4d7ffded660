"""Login-side judging, pure: turns what workloads returned into problems named by node and GPU."""
