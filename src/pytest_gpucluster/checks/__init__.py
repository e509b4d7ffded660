"""Login-side and pure: turns what the workloads returned into measurements and findings.

Each module takes the plain dataclasses a workload of ``workloads`` returned (it may import
them) and answers in typed findings (``verdict.Finding``) and measurements whose fields name the
place: a GPU, a port or link, a node, several nodes together with the culprits where the check
can tell them, or something outside the nodes; each finding's sentence says it for people
(busbw judging, homogeneity, pairing, telemetry analysis and the per-area ``*_findings``
functions; ``places`` holds the rules several share). Nothing here runs on a node, submits a
job, or imports pytest, the session or the launcher; ``workloads`` never imports this package.
"""
