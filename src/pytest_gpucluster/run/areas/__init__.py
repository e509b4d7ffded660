"""The producers of the suite's areas (``run.produce``): one module per area whose jobs need more
than their workload on their declared shape. Importing this package registers them all."""

from pytest_gpucluster.run.areas import (  # noqa: F401
    compute,
    dcgm,
    fabric,
    host,
    ib_write_bw,
    isolation,
    nccl,
    nccl_layers,
    nvbandwidth,
    placement,
    probe,
    rank_failure,
    sdc,
    sharedfs,
    soak,
    storage,
    training,
    xid,
)
