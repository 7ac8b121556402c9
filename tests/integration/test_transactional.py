"""The transactional workload (seed 003 Sec. 3.3) on loopback, and APC live over real cgroups."""

from __future__ import annotations

import math
import threading
import time

import pytest

from tests.integration.conftest import cgroups_unusable
from workloads.transactional import LoadGenerator, burn, make_server


def test_load_generator_measures_a_real_server():
    srv = make_server(work=2_000)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        gen = LoadGenerator(srv.server_address[1], rate=100.0, duration=3.0, seed=1).start()
        time.sleep(2.2)
        w = gen.window(2.0)
        gen.stop()
    finally:
        srv.shutdown()
        srv.server_close()
    assert 50 <= w.throughput_rps <= 160  # Poisson at 100/s over 2 s
    assert 0 < w.mean_response_s < 0.5
    with pytest.raises(ValueError, match="work"):
        make_server(work=0)


@pytest.fixture
def live_cgroups() -> None:
    reason = cgroups_unusable()
    if reason:
        pytest.skip(reason)


def test_response_time_rises_when_share_is_cut_and_apc_moves_cpu_back(live_cgroups):
    from coordinator.apc.live import LiveApc, LiveConfig

    # offered load of about 0.15 core (from this machine's cost of one request), so a 0.1-core quota is
    # an overload whatever the machine's speed; one job with a lot of slack (20 CPU-s, goal 600 s)
    work = 20_000
    t0 = time.process_time()
    for _ in range(20):
        burn(work)
    per_request = (time.process_time() - t0) / 20
    rate = min(300.0, max(10.0, 0.15 / per_request))
    cfg = LiveConfig(cores=1.0, T=2.0, duration=8.0, work=work, rates=((0.0, rate),), tau=0.02,
                     jobs=((20.0, 600.0),), initial_app_share=1.0)
    with LiveApc(cfg) as live:
        time.sleep(3.0)
        full_rt, full_tput = live.measure(2.0)
        live.set_app_share(0.1)
        time.sleep(1.0)  # let the backlog build at the new quota
        time.sleep(2.0)
        cut_rt, _ = live.measure(2.0)
        assert math.isfinite(full_rt) and full_tput > 0.5 * rate
        assert cut_rt > 1.5 * full_rt, (full_rt, cut_rt)
        rows = live.run()
    first = rows[0]
    # at 0.1 core the app is far below its goal while the job is not: APC moves CPU to the app
    assert first["app_rp_measured"] < first["job0_rp_predicted"]
    assert first["app_cores_next"] > 0.3
    assert max(r["app_cores"] for r in rows[1:]) > 0.3
    later = [r["measured_rt_s"] for r in rows[1:] if math.isfinite(r["measured_rt_s"])]
    assert later and min(later) < cut_rt
