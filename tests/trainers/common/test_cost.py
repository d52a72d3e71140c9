"""The cost ledger (trainers/common/cost.py): hard env-step budgets, seconds budgets, and run totals."""

import pytest

from trainers.common.cost import CostLedger


def test_cost_ledger_enforces_a_hard_env_step_budget():
    ledger = CostLedger(max_env_steps=100)
    assert ledger.affordable(100) and not ledger.affordable(101) and not ledger.affordable(-1)
    ledger.charge(60, cpu_seconds=1.5, gpu_seconds=0.5)
    assert ledger.remaining_env_steps == 40 and ledger.affordable(40)
    with pytest.raises(ValueError):
        ledger.charge(41)
    assert ledger.as_dict() == {"max_env_steps": 100, "max_cpu_seconds": None, "max_gpu_seconds": None,
                                "env_steps": 60, "cpu_seconds": 1.5, "gpu_seconds": 0.5}
    ledger.charge(40)
    assert not ledger.affordable(1) and ledger.remaining_env_steps == 0 and ledger.affordable(0)
    assert CostLedger(**ledger.as_dict()) == ledger
    with pytest.raises(ValueError):
        CostLedger(max_env_steps=10, env_steps=11)


def test_cost_ledger_seconds_budget_stops_further_work():
    ledger = CostLedger(max_cpu_seconds=10.0)
    ledger.charge(1000, cpu_seconds=12.0)  # measured after the fact: recorded even past the budget
    assert not ledger.affordable(1) and not ledger.affordable(0)
    with pytest.raises(ValueError):
        ledger.charge(1)
    assert ledger.cpu_seconds == 12.0 and ledger.env_steps == 1000


def test_cost_ledger_unlimited_and_merging():
    free = CostLedger()
    free.charge(10**9, gpu_seconds=3.0)
    assert free.remaining_env_steps is None and free.affordable(10**12)
    a, b = CostLedger(max_env_steps=100, env_steps=30, cpu_seconds=1.0), CostLedger(max_env_steps=50, env_steps=50)
    total = sum([a, b, CostLedger(max_env_steps=10, gpu_seconds=2.0)])
    assert total == CostLedger(max_env_steps=160, env_steps=80, cpu_seconds=1.0, gpu_seconds=2.0)
    assert (a + free).max_env_steps is None and (a + free).env_steps == 30 + 10**9
    assert a.env_steps == 30  # merging leaves the parts alone
