"""Generative and reinforcement-learning zoo models.

- cyclegan: two ResNet generators (9 residual blocks, 256 px) and two 70x70 PatchGAN
  discriminators; one training step as in the reference implementation (Gavel's CycleGAN job):
  identity, adversarial and cycle-consistency losses for the generators (6 generator passes),
  real and fake (detached) losses for each discriminator (one combined backward here);
- dcgan: DCGAN generator and discriminator at 64 px (LSUN);
- a3c: the A3C Atari model of pytorch-a3c (4 conv 32 + LSTM cell 256, 42 px Pong frames);
- a2c, dqn: the Nature-DQN CNN over 4 stacked 84 px frames (actor-critic heads for A2C);
- ppo: 64-64 tanh actor-critic MLP (LunarLander, 8 observations, 4 actions);
- td3: 400-300 actor and twin critics (BipedalWalker, 24 observations, 4 actions).
RL "samples" are environment transitions of one update batch.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dltsched.predictors.zoo.nets_base import Built, register


def _norm_conv(cin: int, cout: int, k: int, stride: int = 1, transpose: bool = False) -> nn.Sequential:
    conv = (nn.ConvTranspose2d(cin, cout, k, stride, 1, output_padding=1) if transpose
            else nn.Conv2d(cin, cout, k, stride, k // 2))
    return nn.Sequential(conv, nn.InstanceNorm2d(cout), nn.ReLU())


class _ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_norm_conv(c, c, 3), nn.Conv2d(c, c, 3, 1, 1), nn.InstanceNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def _generator() -> nn.Sequential:
    return nn.Sequential(_norm_conv(3, 64, 7), _norm_conv(64, 128, 3, 2), _norm_conv(128, 256, 3, 2),
                         *[_ResBlock(256) for _ in range(9)], _norm_conv(256, 128, 3, 2, True),
                         _norm_conv(128, 64, 3, 2, True), nn.Conv2d(64, 3, 7, 1, 3), nn.Tanh())


def _patch_discriminator() -> nn.Sequential:
    mods: list[nn.Module] = [nn.Conv2d(3, 64, 4, 2, 1), nn.LeakyReLU(0.2)]
    for cin, cout, s in ((64, 128, 2), (128, 256, 2), (256, 512, 1)):
        mods += [nn.Conv2d(cin, cout, 4, s, 1), nn.InstanceNorm2d(cout), nn.LeakyReLU(0.2)]
    mods.append(nn.Conv2d(512, 1, 4, 1, 1))
    return nn.Sequential(*mods)


class CycleGan(nn.Module):
    """CycleGAN's two generators and two discriminators, trained as one module."""

    def __init__(self) -> None:
        super().__init__()
        self.gen_ab, self.gen_ba = _generator(), _generator()
        self.disc_a, self.disc_b = _patch_discriminator(), _patch_discriminator()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Generator (adversarial, cycle and identity) and discriminator losses in one. Returns the training
        loss (a scalar)."""
        fake_b, fake_a = self.gen_ab(a), self.gen_ba(b)
        identity = F.l1_loss(self.gen_ba(a), a) + F.l1_loss(self.gen_ab(b), b)
        cycle = F.l1_loss(self.gen_ba(fake_b), a) + F.l1_loss(self.gen_ab(fake_a), b)
        adv = (self.disc_b(fake_b) - 1).square().mean() + (self.disc_a(fake_a) - 1).square().mean()
        real = (self.disc_a(a) - 1).square().mean() + (self.disc_b(b) - 1).square().mean()
        fake = self.disc_a(fake_a.detach()).square().mean() + self.disc_b(fake_b.detach()).square().mean()
        return adv + 10.0 * cycle + 5.0 * identity + real + fake


@register("cyclegan", "monet2photo")
def cyclegan(dataset: str) -> Built:
    """CycleGAN on 256x256 images: two ResNet generators, two PatchGAN discriminators. ``dataset``:
    ``monet2photo``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 3, 256, 256), torch.randn(batch, 3, 256, 256)

    # generator blocks not listed (residual blocks 4, 5, ...) inherit the layer of their input
    blocks = ("gen_ab.0", "gen_ab.1", "gen_ab.2", "gen_ab.3", "gen_ab.6", "gen_ab.9", "gen_ab.12",
              "gen_ab.14", "gen_ba", "disc_a", "disc_b")
    return Built(CycleGan(), make_inputs, blocks)


class DcGan(nn.Module):
    """DCGAN's generator and discriminator, trained as one module.

    Parameters
    ----------
    z
        Latent size.
    c
        Base channel width.
    """

    def __init__(self, z: int = 100, c: int = 64) -> None:
        super().__init__()
        self.gen = nn.Sequential(
            nn.ConvTranspose2d(z, c * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(c * 8), nn.ReLU(),
            nn.ConvTranspose2d(c * 8, c * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 4), nn.ReLU(),
            nn.ConvTranspose2d(c * 4, c * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 2), nn.ReLU(),
            nn.ConvTranspose2d(c * 2, c, 4, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            nn.ConvTranspose2d(c, 3, 4, 2, 1, bias=False), nn.Tanh())
        self.disc = nn.Sequential(
            nn.Conv2d(3, c, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
            nn.Conv2d(c, c * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 2), nn.LeakyReLU(0.2),
            nn.Conv2d(c * 2, c * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 4), nn.LeakyReLU(0.2),
            nn.Conv2d(c * 4, c * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 8), nn.LeakyReLU(0.2),
            nn.Conv2d(c * 8, 1, 4, 1, 0, bias=False), nn.Flatten())

    def forward(self, noise: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Generator and discriminator least-squares losses in one. Returns the training loss (a scalar)."""
        fake = self.gen(noise)
        logits = self.disc(torch.cat((real, fake), 0)).squeeze(-1)
        labels = torch.cat((torch.ones_like(logits[: real.shape[0]]),
                            torch.zeros_like(logits[real.shape[0]:])))
        return F.binary_cross_entropy_with_logits(logits, labels)


@register("dcgan", "lsun")
def dcgan(dataset: str) -> Built:
    """DCGAN on 64x64 images: transposed-convolution generator and convolutional discriminator. ``dataset``:
    ``lsun``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 100, 1, 1), torch.randn(batch, 3, 64, 64)

    return Built(DcGan(), make_inputs, ("gen.0", "gen.3", "gen.6", "gen.9", "gen.12", "disc"))


class ActorCritic(nn.Module):
    """Conv trunk + optional LSTM cell + policy and value heads; A2C/A3C loss."""

    def __init__(self, trunk: nn.Module, features: int, actions: int, lstm: bool) -> None:
        super().__init__()
        self.trunk = trunk
        self.lstm = nn.LSTMCell(features, 256) if lstm else None
        self.fc = nn.Sequential(nn.Linear(features, 512), nn.ReLU()) if not lstm else nn.Identity()
        width = 256 if lstm else 512
        self.heads = nn.ModuleDict({"policy": nn.Linear(width, actions), "value": nn.Linear(width, 1)})

    def forward(self, obs: torch.Tensor, action: torch.Tensor, ret: torch.Tensor) -> torch.Tensor:
        """Advantage actor-critic loss: policy gradient, value error and an entropy bonus. Returns the
        training loss (a scalar)."""
        h = self.trunk(obs)
        h = self.lstm(h)[0] if self.lstm is not None else self.fc(h)
        logp = self.heads["policy"](h).log_softmax(-1)
        value = self.heads["value"](h).squeeze(-1)
        adv = ret - value
        chosen = logp.gather(1, action.unsqueeze(1)).squeeze(1)
        entropy = -(logp.exp() * logp).sum(-1)
        return (-(chosen * adv.detach()) + 0.5 * adv.square() - 0.01 * entropy).mean()


def _nature_cnn() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten())


def _rl_inputs(channels: int, side: int, actions: int):  # noqa: ANN202 - returns a small closure
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, channels, side,
                           side), torch.randint(0, actions, (batch,)), torch.randn(batch)

    return make_inputs


@register("a3c", "pong")
def a3c(dataset: str) -> Built:
    """A3C actor-critic with an LSTM on 42x42 frames (6 actions). ``dataset``: ``pong``."""
    trunk = nn.Sequential(*[nn.Sequential(nn.Conv2d(1 if not i else 32, 32, 3, 2, 1), nn.ELU())
                            for i in range(4)],
                          nn.Flatten())
    return Built(ActorCritic(trunk, 32 * 3 * 3, 6, lstm=True), _rl_inputs(1, 42, 6),
                 ("trunk.0", "trunk.1", "trunk.2", "trunk.3", "lstm", "heads"))


@register("a2c", "atari")
def a2c(dataset: str) -> Built:
    """A2C actor-critic on the Nature CNN over four stacked 84x84 frames (6 actions). ``dataset``:
    ``atari``."""
    return Built(ActorCritic(_nature_cnn(), 64 * 7 * 7, 6, lstm=False), _rl_inputs(4, 84, 6),
                 ("trunk.0", "trunk.2", "trunk.4", "fc", "heads"))


class Dqn(nn.Module):
    """Deep Q-network: the Nature CNN and a two-layer value head.

    Parameters
    ----------
    actions
        Number of actions.
    """

    def __init__(self, actions: int = 6) -> None:
        super().__init__()
        self.net = nn.Sequential(*_nature_cnn(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
                                 nn.Linear(512, actions))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Huber loss of the chosen actions' values against the targets. Returns the training loss (a
        scalar)."""
        q = self.net(obs).gather(1, action.unsqueeze(1)).squeeze(1)
        return F.smooth_l1_loss(q, target)


@register("dqn", "atari")
def dqn(dataset: str) -> Built:
    """DQN: the Nature CNN over four stacked 84x84 frames, Huber loss on the chosen action's value.
    ``dataset``: ``atari``."""
    return Built(Dqn(), _rl_inputs(4, 84, 6), ("net.0", "net.2", "net.4", "net.7", "net.9"))


def _mlp(sizes: tuple[int, ...], act: type[nn.Module]) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(act())
    return nn.Sequential(*mods)


class Ppo(nn.Module):
    """PPO's actor and critic MLPs.

    Parameters
    ----------
    obs
        Observation size.
    actions
        Number of actions.
    """

    def __init__(self, obs: int = 8, actions: int = 4) -> None:
        super().__init__()
        self.actor = _mlp((obs, 64, 64, actions), nn.Tanh)
        self.critic = _mlp((obs, 64, 64, 1), nn.Tanh)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
        """Clipped surrogate objective plus the critic's squared error. Returns the training loss (a
        scalar)."""
        logp = self.actor(obs).log_softmax(-1).gather(1, action.unsqueeze(1)).squeeze(1)
        ratio = (logp - logp.detach()).exp()
        clipped = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        return -clipped.mean() + 0.5 * (self.critic(obs).squeeze(-1) - adv).square().mean()


@register("ppo", "lunarlander")
def ppo(dataset: str) -> Built:
    """PPO: 64-64 tanh actor and critic on 8 observations (4 actions), clipped objective. ``dataset``:
    ``lunarlander``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 8), torch.randint(0, 4, (batch,)), torch.randn(batch)

    return Built(Ppo(), make_inputs, ("actor.0", "actor.2", "actor.4", "critic"))


class Td3(nn.Module):
    """TD3's actor and twin critics.

    Parameters
    ----------
    obs
        Observation size.
    act
        Action size.
    """

    def __init__(self, obs: int = 24, act: int = 4) -> None:
        super().__init__()
        self.actor = _mlp((obs, 400, 300, act), nn.ReLU)
        self.critics = nn.ModuleList(_mlp((obs + act, 400, 300, 1), nn.ReLU) for _ in range(2))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Twin critics' squared errors plus the actor's loss through the first critic. Returns the training
        loss (a scalar)."""
        sa = torch.cat((obs, action), -1)
        critic = sum(F.mse_loss(c(sa).squeeze(-1), target) for c in self.critics)
        actor = -self.critics[0](torch.cat((obs, torch.tanh(self.actor(obs))), -1)).mean()
        return critic + actor


@register("td3", "bipedalwalker")
def td3(dataset: str) -> Built:
    """TD3: 400-300 actor and twin critics on 24 observations and 4 continuous actions. ``dataset``:
    ``bipedalwalker``."""
    def make_inputs(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(batch, 24), torch.randn(batch, 4), torch.randn(batch)

    return Built(Td3(), make_inputs, ("actor", "critics.0", "critics.1"))

