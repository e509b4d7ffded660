"""Writes the representative 4×H200 NVLink snapshot pairs (``nvlink_4xH200_*``) from the figures
measured on a healthy 4×H200 node (NV18: 18 links per GPU) over 5 min 21 s of the suite's own
traffic: on every link ``nvlink_crc_data`` rose by 267…500 and ``nvlink_ecc_data`` by 600…4200;
replay, recovery and CRC flit counters did not move. The per-link values are spread over those
ranges deterministically; the lifetime totals before the run are made up (never judged).

    python tests/data/fabric/make_nvlink_samples.py
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).parent
GPUS, LINKS, SPAN_S, T0 = 4, 18, 321.0, 1_795_000_000.0


def _link(gpu: int, link: int, after: bool) -> dict[str, object]:
    crc = 267 + (link * 13 + gpu * 29) % 234  # 267 … 500
    ecc = 600 + (link * 211 + gpu * 577) % 3601  # 600 … 4200
    base = {"nvlink_replay": 0, "nvlink_recovery": 0, "nvlink_crc_flit": 0}
    lifetime = {"nvlink_crc_data": 91_000 + 1_000 * gpu + 37 * link, "nvlink_ecc_data": 740_000 + 5_000 * link}
    counters = {**base, **lifetime}
    if after:
        counters["nvlink_crc_data"] += crc
        counters["nvlink_ecc_data"] += ecc
    return {"link": link, "counters": counters, "unsupported": []}


def snapshot(after: bool) -> dict[str, object]:
    gpus = [{"index": g, "links": [_link(g, k, after) for k in range(LINKS)], "errors": []} for g in range(GPUS)]
    return {
        "node": "node1",
        "time_s": T0 + (SPAN_S if after else 0.0),
        "root": "/sys/class/infiniband",
        "ib_ports": [],
        "gpus": gpus,
        "nvml_status": "ok",
        "error": "",
    }


def main() -> None:
    before, healthy = snapshot(False), snapshot(True)
    replay = copy.deepcopy(healthy)
    replay["gpus"][2]["links"][5]["counters"]["nvlink_replay"] += 1  # type: ignore[index]
    for name, doc in (("before", before), ("after_healthy", healthy), ("after_replay", replay)):
        path = HERE / f"nvlink_4xH200_{name}_representative_sample.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
