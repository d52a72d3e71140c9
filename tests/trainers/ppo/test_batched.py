"""The batched model (``trainers/ppo/batched.py``): zero padding is exact, and its Adam is
``torch.optim.Adam`` agent by agent."""

import copy

import pytest
import torch

from trainers.common.nets import Actor, Critic
from trainers.common.state import StateScales, StockLayout
from trainers.ppo.batched import NARROW, BatchedAdam, BatchedNets


def test_padding_and_cropping_are_exact():
    torch.manual_seed(0)
    actors = [Actor(5, 2, (3, 2), -0.5), Actor(5, 2, (7, 4), -0.5)]
    critics = [Critic(5, (3, 2)), Critic(5, (7, 4))]
    nets = BatchedNets.stack(actors, critics)
    states = torch.randn(2, 6, 5)
    full = nets.sub([0, 1], grad=True)
    mean, value = full.mean(states), full.value(states)
    for i in range(2):
        torch.testing.assert_close(mean[i], actors[i].net(states[i]))
        torch.testing.assert_close(value[i], critics[i](states[i]))
    grads = torch.autograd.grad(mean.pow(2).sum() + value.pow(2).sum() + full.entropy().sum(), full.params)
    first_layer = grads[1]  # actor layer 0, [N, in, out]: agent 0 has 3 real units of 7
    assert first_layer[0, :, 3:].abs().max() == 0 and first_layer[0, :, :3].abs().max() > 0
    alone = nets.sub([0])  # agent 0 cut to its own widths
    assert alone.params[1].shape == (1, 5, 3) and alone.params[3].shape == (1, 3, 2)
    torch.testing.assert_close(alone.mean(states[:1])[0], actors[0].net(states[0]))


SCALES = StateScales(1e-3, 0.1, tuple(10.0 * (i + 1) for i in range(8)))


@pytest.mark.parametrize("layout", [None, StockLayout(8, 3, SCALES)])
def test_fused_narrow_layers_compute_what_the_matmuls_do(layout: StockLayout | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The products-and-sums form of the narrow layers (Inductor's) gives the matmuls' means,
    values and gradients within float rounding; a layer wider than ``NARROW`` stays a matmul."""
    torch.manual_seed(0)
    dim = 1 + 8 * 2 + 8 * 3
    assert dim > NARROW >= 3 + 2
    actors = [Actor(dim, 8, (8,), -0.5, layout), Actor(dim, 8, (5,), -0.5, layout)]
    critics = [Critic(dim, (8,)), Critic(dim, (5,))]
    plain = BatchedNets.stack(actors, critics).sub([0, 1], grad=True)
    fused = BatchedNets.stack(actors, critics).sub([0, 1], grad=True)
    fused.fused = True
    states = torch.rand(2, 6, dim) + 0.5
    matmuls: list[int] = []
    baddbmm = torch.baddbmm
    monkeypatch.setattr(torch, "baddbmm", lambda *a, **k: matmuls.append(a[1].shape[-1]) or baddbmm(*a, **k))
    outputs = {}
    for name, nets in (("plain", plain), ("fused", fused)):
        matmuls.clear()
        mean, value = nets.mean(states), nets.value(states)
        outputs[name] = (mean, value, *torch.autograd.grad(mean.sin().sum() + value.pow(2).sum(), nets.params[1:]))
        inputs = {"plain": [dim if layout is None else 5, 8, dim, 8], "fused": [dim] * (1 if layout else 2)}
        assert matmuls == inputs[name]
    for a, b in zip(outputs["plain"], outputs["fused"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def assert_trained_as(nets: BatchedNets, actors: list[Actor], critics: list[Critic],
                      copies: list[torch.nn.Module]) -> None:
    """Each agent's weights in ``nets`` are its reference copy's (``copies``: the actors, then the critics)."""
    for i in range(len(actors)):
        actor, critic = copy.deepcopy(actors[i]), copy.deepcopy(critics[i])
        nets.write_back(i, actor, critic)
        for a, b in zip([*actor.parameters(), *critic.parameters()],
                        [*copies[i].parameters(), *copies[len(actors) + i].parameters()]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_batched_adam_is_torch_adam_per_agent_and_leaves_resting_agents_alone():
    torch.manual_seed(1)
    actors = [Actor(4, 2, (6,), -0.5), Actor(4, 2, (3,), -0.5)]
    critics = [Critic(4, (6,)), Critic(4, (3,))]
    copies = [copy.deepcopy(m) for m in (*actors, *critics)]
    lrs = [1e-2, 3e-3]
    torch_opts = [torch.optim.Adam([*copies[i].parameters(), *copies[2 + i].parameters()], lr=lrs[i]) for i in range(2)]
    nets = BatchedNets.stack(actors, critics)
    adam = BatchedAdam(nets, torch.tensor(lrs, dtype=torch.float64))
    for step in range(4):
        agents = [0, 1] if step % 2 == 0 else [0]  # agent 1 rests every other step
        x = torch.randn(2, 5, 4)
        sub = nets.sub(agents, grad=True)
        loss = sub.mean(x[agents]).sum() + sub.value(x[agents]).pow(2).sum() + sub.log_std.sum()
        before = [p[1].clone() for p in nets.params]
        adam.step(sub, torch.autograd.grad(loss, sub.params), agents, max_grad_norm=0.5)
        assert all(torch.equal(b, p[1]) for b, p in zip(before, nets.params)) == (1 not in agents)
        for i in agents:
            params = [*copies[i].parameters(), *copies[2 + i].parameters()]
            loss = copies[i].net(x[i]).sum() + copies[2 + i](x[i]).pow(2).sum() + copies[i].log_std.sum()
            torch_opts[i].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            torch_opts[i].step()
    assert_trained_as(nets, actors, critics, copies)
    for i in range(2):
        saved = adam.state_of(i)
        theirs = torch_opts[i].state_dict()["state"]
        assert saved["state"][0]["step"] == theirs[0]["step"]
        for k, moments in saved["state"].items():
            torch.testing.assert_close(moments["exp_avg_sq"], theirs[k]["exp_avg_sq"], atol=1e-7, rtol=1e-4)
    assert float(nets.params[1][1, :, 3:].abs().max()) == 0  # agent 1's padding stayed zero


def test_the_anchor_pulls_the_actors_layers_towards_their_start_as_adamw_does():
    """``ppo.anchor``: each step is torch's Adam step plus ``−lr × strength × (θ − θ₀)`` on the
    actor's layers (AdamW's decoupled decay, towards the start), computed by hand here; the
    log-std and the critic step as plain Adam, and the narrower agent's padding stays zero."""
    torch.manual_seed(2)
    actors = [Actor(4, 2, (6,), -0.5), Actor(4, 2, (3,), -0.5)]
    critics = [Critic(4, (6,)), Critic(4, (3,))]
    starts = [copy.deepcopy(a) for a in actors]
    with torch.no_grad():  # the agents have moved off their starts
        for a in actors:
            for p in a.net.parameters():
                p.add_(0.3 * torch.randn_like(p))
    copies = [copy.deepcopy(m) for m in (*actors, *critics)]
    lrs, strengths = [1e-2, 3e-3], [5.0, 20.0]
    torch_opts = [torch.optim.Adam([*copies[i].parameters(), *copies[2 + i].parameters()], lr=lrs[i]) for i in range(2)]
    nets = BatchedNets.stack(actors, critics)
    anchor = BatchedNets.stack(starts, critics).params
    adam = BatchedAdam(nets, torch.tensor(lrs, dtype=torch.float64), anchor,
                       torch.tensor(strengths, dtype=torch.float64))
    for _ in range(3):
        x = torch.randn(2, 5, 4)
        sub = nets.sub([0, 1], grad=True)
        loss = sub.mean(x).sum() + sub.value(x).pow(2).sum() + sub.log_std.sum()
        adam.step(sub, torch.autograd.grad(loss, sub.params), [0, 1], max_grad_norm=0.5)
        for i in range(2):
            params = [*copies[i].parameters(), *copies[2 + i].parameters()]
            loss = copies[i].net(x[i]).sum() + copies[2 + i](x[i]).pow(2).sum() + copies[i].log_std.sum()
            torch_opts[i].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            with torch.no_grad():
                pulls = [lrs[i] * strengths[i] * (p - s) for p, s in zip(copies[i].net.parameters(),
                                                                      starts[i].net.parameters())]
            torch_opts[i].step()
            with torch.no_grad():
                for p, pull in zip(copies[i].net.parameters(), pulls):
                    p.sub_(pull)
    assert_trained_as(nets, actors, critics, copies)
    assert float(nets.params[1][1, :, 3:].abs().max()) == 0
