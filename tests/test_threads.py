"""train.threads: fixed counts, and the governor that drops threads while other processes keep cores busy."""

import pytest
import torch

from simforcing.config import ConfigError, load_config
from simforcing.threads import ThreadGovernor, configure_threads, parse_threads


class Machine:
    """A fake clock, machine-wide busy CPU time and this process's CPU time."""

    def __init__(self):
        self.t = self.busy = self.own = 0.0

    def run(self, seconds: float, own_cores: float, other_cores: float):
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + other_cores) * seconds


def _governor(m: Machine, cap=2):
    applied = []
    g = ThreadGovernor(cap, interval=1.0, clock=lambda: m.t, busy=lambda: m.busy, own=lambda: m.own,
                       apply=applied.append)
    return g, applied


def test_a_quiet_machine_never_changes_the_count():
    m = Machine()
    g, applied = _governor(m)
    for _ in range(20):
        m.run(0.5, own_cores=2.0, other_cores=0.05)
        assert g.update() is None
    assert applied == [2] and g.threads == 2


def test_a_busy_core_drops_a_thread_and_its_end_brings_it_back():
    m = Machine()
    g, applied = _governor(m)
    m.run(1.0, 2.0, 0.0)
    g.update()
    m.run(1.5, 1.0, 1.0)  # another process takes a core
    assert g.update() == 1 and g.others == pytest.approx(1.0)
    m.run(1.5, 1.0, 1.0)
    assert g.update() is None  # still busy: stays at 1
    m.run(1.5, 1.0, 0.0)  # it ended
    assert g.update() == 2
    assert applied == [2, 1, 2]


def test_samples_only_every_interval():
    m = Machine()
    g, _ = _governor(m)
    m.run(0.2, 1.0, 1.0)
    assert g.update() is None  # first sample only
    m.run(0.2, 1.0, 1.0)
    assert g.update() is None  # too soon after it
    m.run(1.0, 1.0, 1.0)
    assert g.update() == 1


def test_parse_and_configure():
    assert parse_threads("auto") is None and parse_threads("3") == 3
    with pytest.raises(ValueError, match="train.threads"):
        parse_threads("0")
    before = torch.get_num_threads()
    try:
        assert configure_threads("1") is None and torch.get_num_threads() == 1
        assert configure_threads("auto", "cuda") is None
        g = configure_threads("auto")  # the test process runs with OMP_NUM_THREADS=1 (conftest): cap 1
        assert isinstance(g, ThreadGovernor) and g.max_threads == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="train.threads"):
        load_config("demo", ["--train.threads=none"]).validate()
