"""A trained policy acting: one action chunk per call, no wasted work (SPEC §9 inference).

    runner = PolicyRunner.load(RUN)                        # newest valid checkpoint, its own config and statistics
    chunk = runner.act(image, state, instruction, gen)     # (A, action_dim) de-normalised actions

Per chunk: the observation ([external | wrist], uint8 (H, cams·W, 3), any size: each camera gets the training
resize + centre crop) is encoded by the frozen VAE into the clean first latent frame; then ``policy.flow_steps``
Euler steps of the shift-``flow.shift`` schedule from noise. ``action_only`` / ``unconditional``: the observation's
video features are computed once (``WorldModel.observation_context``, one video-expert pass over the first frame)
and every step runs the action expert alone — no future video is made. ``video_action``: every step is one joint
forward over future video and actions, both denoised together, the first frame fixed. ``runner.counts`` counts what
ran (observation encodes, action-expert steps, joint forwards) — the bench reports them per chunk.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

import simforcing.flow as flow
from simforcing.config import Config, ConfigError
from simforcing.data.paired import frames_to_target, to_unit_range
from simforcing.data.stats import Normalizer
from simforcing.errors import CheckpointError
from simforcing.inputs import check_image, check_instruction, check_vector
from simforcing.models.text import load_text_encoder
from simforcing.models.vae import load_vae
from simforcing.policy.settings import ATTENTION_MODE
from simforcing.runs.folder import open_run
from simforcing.runs.scored import ScoredRun


class PolicyRunner:
    def __init__(self, cfg: Config, model: torch.nn.Module, vae, stats: dict, device="cpu", text_encoder=None):
        self.cfg, self.model, self.vae, self.device = cfg, model.eval(), vae, torch.device(device)
        self.normalizer = Normalizer(stats)
        self.counts: Counter = Counter()
        self._text_encoder = text_encoder
        self._text: dict[str, torch.Tensor] = {}
        self.scored: Optional[ScoredRun] = None  # the run folder, checkpoint and step it acts with (``load``)

    @classmethod
    def load(cls, run_dir: str | Path, device="cpu", flag: str = "--runs") -> "PolicyRunner":
        """The newest valid checkpoint of a policy run (``runs.folder.open_run``: a world-model run is refused by name),
        built from the config that checkpoint was trained with; ``runner.scored`` records what it is."""
        run = open_run(run_dir, ("policy",), flag, "policy")
        if not run.cfg.model.action_head:
            raise ConfigError(f"{flag}: {run_dir}: {run.checkpoint.path.name} was trained as a world model "
                              "(model.action_head false), not a policy")
        model = run.model(attention_mode=ATTENTION_MODE[run.cfg.policy.setting])
        runner = cls(run.cfg, model.to(device), load_vae(run.cfg, device), run.stats, device)
        runner.scored = ScoredRun.of(run_dir, run.checkpoint.path, run.step)
        return runner

    # -- inputs ---------------------------------------------------------------------------------------------------------
    def text(self, instruction: str) -> torch.Tensor:
        """(1, n, text_dim) embedding of the instruction (encoded once, as ``data embed-text`` does)."""
        if instruction not in self._text:
            if self._text_encoder is None:
                self._text_encoder = load_text_encoder(self.cfg)
            self._text[instruction] = self._text_encoder.encode([instruction])[0][None].to(self.device)
        return self._text[instruction]

    def observation(self, image: np.ndarray) -> torch.Tensor:
        """uint8 (H, cams·W, 3) -> (1, 3, 1, data.height, data.width) in [−1, 1], each camera resized alone."""
        cams, d = self.cfg.policy.cameras, self.cfg.data
        if image.ndim != 3 or image.shape[1] % cams:
            raise ValueError(f"observation: expected uint8 (H, {cams}·W, 3) with the cameras side by side; got "
                             f"{image.shape}")
        w = image.shape[1] // cams
        parts = [frames_to_target(image[None, :, k * w:(k + 1) * w], d.height, d.width // cams) for k in range(cams)]
        return to_unit_range(torch.cat(parts, dim=3))[None].to(self.device)  # (1, 3, 1, H, W)

    def check_inputs(self, images: Sequence[np.ndarray], states: np.ndarray, instructions: Sequence[str]) -> np.ndarray:
        """ValueError naming the observation, state or instruction a policy cannot act on (``simforcing.inputs``: an
        image that is not uint8 (H, cams·W, 3), a state of another width or holding NaN/inf, an empty instruction)
        — before any network runs. Returns the states as float64 (B, S)."""
        d = self.cfg.data
        states = np.asarray(states, np.float64)
        if states.ndim != 2 or len(states) != len(images) or len(instructions) != len(images):
            raise ValueError(f"states: expected ({len(images)}, {d.state_dim}) for {len(images)} images and as many "
                             f"instructions; got states {states.shape} and {len(instructions)} instructions")
        for i, (img, st, text) in enumerate(zip(images, states, instructions)):
            name = "image" if len(images) == 1 else f"images[{i}]"
            check_image(img, name, (d.height, d.width))  # the cameras side by side: data.width in all
            check_vector(st, "state" if len(images) == 1 else f"states[{i}]", d.state_dim)
            check_instruction(text)
        return states

    # -- one chunk ----------------------------------------------------------------------------------------------------
    def act(self, image: np.ndarray, state: np.ndarray, instruction: str,
            gen: torch.Generator | None = None) -> np.ndarray:
        """De-normalised actions (A, action_dim) for the observation now (module docstring)."""
        return self.act_batch([image], np.asarray(state, np.float64).reshape(1, -1), [instruction], [gen])[0]

    def texts(self, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, n, text_dim) embeddings of the instructions, zero-padded to the longest, and the mask (B, n) — None
        when all have the same length (one instruction: exactly ``text``)."""
        embs = [self.text(t)[0] for t in instructions]
        n = max(e.shape[0] for e in embs)
        if all(e.shape[0] == n for e in embs):
            return torch.stack(embs), None
        out = torch.zeros(len(embs), n, embs[0].shape[1], device=self.device)
        mask = torch.zeros(len(embs), n, dtype=torch.bool, device=self.device)
        for i, e in enumerate(embs):
            out[i, :e.shape[0]], mask[i, :e.shape[0]] = e, True
        return out, mask

    @torch.no_grad()
    def act_batch(self, images: Sequence[np.ndarray], states: np.ndarray, instructions: Sequence[str],
                  gens: Sequence[torch.Generator | None]) -> np.ndarray:
        """B observations at once -> de-normalised actions (B, A, action_dim): each sample draws its noise from its own
        generator in the order :meth:`act` does, so row i is :meth:`act` on sample i (to float rounding)."""
        cfg, m = self.cfg, self.model
        b = len(images)
        states = self.check_inputs(images, states, instructions)
        z0 = self.vae.encode(torch.cat([self.observation(img) for img in images]))  # (B, C, 1, h, w)
        s = torch.from_numpy(self.normalizer.normalize("state", states.astype(np.float32))).to(self.device)
        text, text_mask = self.texts(instructions)
        a_shape = (1, cfg.data.actions_per_window, cfg.data.action_dim)
        video = cfg.policy.setting == "video_action"
        noise = []
        for g in gens:
            a_i = torch.randn(a_shape, generator=g)
            z_i = torch.randn((1, z0.shape[1], cfg.latent_frames - 1, *z0.shape[3:]), generator=g) if video else None
            noise.append((a_i, z_i))
        a = torch.cat([n[0] for n in noise]).to(self.device)
        taus = flow.euler_schedule(cfg.policy.flow_steps, cfg.flow.shift).to(self.device)
        if video:
            z = torch.cat([n[1] for n in noise]).to(self.device)
            for i in range(cfg.policy.flow_steps):
                tau = taus[i].expand(b)
                u_v, u_a = m.policy_forward(z, tau, z0, a, tau, s, text, text_mask)
                self.counts["joint_forwards"] += 1
                z = flow.euler_step(z, u_v, taus[i], taus[i + 1])
                a = flow.euler_step(a, u_a, taus[i], taus[i + 1])
        else:
            obs = m.observation_context(z0, s, text, text_mask)
            self.counts["observation_encodes"] += 1
            for i in range(cfg.policy.flow_steps):
                u_a = m.action_velocity(obs, a, taus[i].expand(b))
                self.counts["action_steps"] += 1
                a = flow.euler_step(a, u_a, taus[i], taus[i + 1])
        self.counts["chunks"] += b
        actions = self.normalizer.denormalize("action", a.float().cpu().numpy())
        self.check_actions(actions)
        return actions

    def check_actions(self, actions: np.ndarray) -> None:
        """CheckpointError when the policy's actions (B, A, action_dim) hold NaN/inf — a diverged or corrupted
        checkpoint — so that no environment executes them."""
        bad = ~np.isfinite(actions).reshape(len(actions), -1).all(axis=1)
        if bad.any():
            what = (f"{self.scored.run} ({self.scored.checkpoint}, step {self.scored.step})"
                    if self.scored else "this policy")
            raise CheckpointError(f"{what} produced non-finite actions for sample(s) {np.flatnonzero(bad).tolist()} "
                                  "of its batch: the checkpoint is diverged or corrupted; act with an earlier one "
                                  "(policy eval --runs NAME=RUN uses the newest valid checkpoint: remove the bad one)")
