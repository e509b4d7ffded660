"""Login-side and pure: turns what the workloads returned into measurements and problems.

Each module takes the plain dataclasses a workload of ``workloads`` returned (it may import
them) and answers in sentences that name the node, GPU or link: busbw judging, homogeneity,
pairing, telemetry analysis and the per-area ``*_problems`` functions. Nothing here runs on a
node, submits a job, or imports pytest, the session or the launcher; ``workloads`` never
imports this package.
"""
