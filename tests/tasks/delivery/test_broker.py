from tasks.delivery.broker import Order, PaperBroker


def test_sells_first_rejections_and_persistence(tmp_path):
    path = tmp_path / "account.json"
    broker = PaperBroker(path, initial_cash=1_000.0, cost_pct=0.01)
    fills = broker.submit([Order("A", "buy", 5)], {"A": 100.0})
    assert fills[0].status == "filled" and broker.cash == 1_000 - 505
    fills = broker.submit([Order("B", "buy", 5), Order("A", "sell", 5), Order("A", "sell", 1)], {"A": 100.0, "B": 200.0})
    assert [(f.side, f.symbol, f.status) for f in fills] == [
        ("sell", "A", "filled"), ("sell", "A", "rejected"), ("buy", "B", "rejected")]
    reopened = PaperBroker(path, initial_cash=0.0, cost_pct=0.01)
    assert reopened.cash == broker.cash and reopened.positions == {}
