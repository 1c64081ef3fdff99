"""Typed configuration: nested dataclasses, the three presets and command-line overrides.

    cfg = load_config("demo", ["--train.lr=3e-5", "--model.num_layers", "2"])

Every field can be overridden as ``--section.field=value`` (or ``--section.field value``). Unknown fields and
ill-typed values raise :class:`ConfigError` naming the field. ``cfg.validate()`` checks cross-field constraints
(frame count ``1 + 4L``, resolution divisible by the VAE stride × patch, probabilities in [0, 1], ...) before any
work starts. Data paths never have defaults.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from simforcing.errors import ConfigError


# Training methods (SPEC §3, §4, §6): the one list. Each is a step function + preset in simforcing/methods.py.
# Stage 0, the video prior (a plain video model standing in for Wan2.2 where none exists: the demo), is not in the
# paper's list; it trains the same network without actions (simforcing.prior).
VIDEO_PRIOR_METHOD = "video_prior"
STAGE1_METHOD = "sim_pretrain"
PRETRAIN_METHODS = (VIDEO_PRIOR_METHOD, STAGE1_METHOD)  # what `simforcing pretrain --method` trains
STAGE2_METHODS = ("sft", "joint_fm", "value_distill", "motion_distill", "simforcing")
METHOD_NAMES = (VIDEO_PRIOR_METHOD, STAGE1_METHOD, *STAGE2_METHODS)

# train.compile / sample.compile (simforcing.training.compiled): "off"; "module": each network's calls compiled whole
# (what `true` meant before the modes); "regional": each layer of model.layers compiled on its own (one graph serves
# every layer alike: seconds of compiling instead of minutes); "graphs": "regional" with CUDA graphs
# (mode="reduce-overhead": each layer's kernels replayed as one launch), CUDA only
COMPILE_MODES = ("off", "module", "regional", "graphs")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")  # a boolean's spellings


class CompileMode(str):
    """The type of ``train.compile`` / ``sample.compile``: one of :data:`COMPILE_MODES`, the booleans of before
    (true/false in a config file, a run's config.json or ``--train.compile=true``) read as "module"/"off"."""


def compile_mode(value: Any, name: str) -> str:
    """``value`` (a mode, or a boolean in any spelling) as one of :data:`COMPILE_MODES`; ConfigError naming ``name``."""
    if isinstance(value, bool):
        return "module" if value else "off"
    s = str(value).strip().lower()
    if s in COMPILE_MODES:
        return s
    if s in _TRUE or s in _FALSE:
        return "module" if s in _TRUE else "off"
    raise ConfigError(f"{name}: got {value!r}; expected one of {', '.join(COMPILE_MODES)} (true = module, "
                      "false = off)")


# ----------------------------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class DataConfig:
    root: Optional[str] = None  # dataset folder (no default: always given by the user)
    frames: int = 21  # F frames per window, must be 1 + 4L (VAE temporal stride)
    frame_stride: int = 1  # steps between kept frames (InternData-A1: 4 -> 129-step window)
    height: int = 224
    width: int = 320
    action_dim: int = 7
    state_dim: int = 7
    windows_per_episode: int = 30  # random windows per trajectory per epoch
    fixed_window: bool = False  # True: one fixed window per trajectory ("no trajectory augmentation")
    text_max_tokens: int = 128
    text_cache: Optional[str] = None  # folder of cached instruction embeddings (default: ROOT/text_cache)
    latent_cache: Optional[str] = None  # folder written by `simforcing data encode` (optional)
    skip_bad: bool = False  # skip malformed episodes (one log line each, counted) instead of stopping
    num_workers: int = 0
    cache_episodes: int = 8  # decoded episodes kept in memory per process (LRU); the demo keeps all of them
    # what sim frames show outside the arm: "black" or "R,G,B" in 0..255; None: the dataset's own (info.json
    # sim_background, "black" when it has none) — set it only to override the dataset
    sim_background: Optional[str] = None
    # what the simulation videos show: "arm" (the arm alone on sim_background, BridgeData V2's pairs) or "scene" (the
    # whole scene as the simulator sees it, InternData-A1's); None: the dataset's own (info.json pairing, "arm" when it
    # has none). With "scene" the first-frame masking (mask-file, sam3: the arm alone) is refused: masking.py
    pairing: Optional[str] = None
    # the cameras a world model sees jointly (beyond the paper, after Ctrl-World and FastWAM: a wrist camera shows the
    # contacts one external view hides): None — the dataset's first view alone, a one-view model (every run before
    # views) — or names of the dataset's views (meta/info.json "views"), comma-separated, e.g. "external,wrist"; each
    # view's frames are brought to data.height × data.width, then put side by side along view_layout into the one
    # frame the VAE and the network see (Wan2.2's weights and the VAE unchanged): "width" — [v1 | v2 | ...], as FastWAM
    # and the paper's Tab. 5 policy concatenate their cameras — or "height" (stacked, as Ctrl-World stacks its views)
    views: Optional[str] = None
    view_layout: str = "width"

    @property
    def view_names(self) -> tuple[str, ...]:
        """The views named by ``views`` in order; () for a one-view model (the dataset's first view)."""
        return tuple(v.strip() for v in self.views.split(",")) if self.views else ()

    @property
    def num_views(self) -> int:
        """How many views one frame of the model holds (1 for a one-view model)."""
        return max(1, len(self.view_names))

    @property
    def frame_hw(self) -> tuple[int, int]:
        """The model's frame (H, W): the views' data.height × data.width frames side by side along ``view_layout``."""
        if self.view_layout == "height":
            return self.height * self.num_views, self.width
        return self.height, self.width * self.num_views

    @property
    def window_steps(self) -> int:
        """Raw time steps covered by one window (Bridge 21, InternData-A1 129)."""
        return (self.frames - 1) * self.frame_stride + 1

    @property
    def actions_per_window(self) -> int:
        """All actions inside the window are kept: (F - 1) * stride (Bridge 20, InternData-A1 128)."""
        return (self.frames - 1) * self.frame_stride


@dataclass
class VAEConfig:
    kind: str = "wan"  # "wan" (diffusers AutoencoderKLWan from `path`) or "demo" (small linear VAE fitted on frames)
    path: Optional[str] = None  # local folder of the Wan2.2 VAE (diffusers layout) or of the fitted demo VAE
    latent_channels: int = 48
    spatial_stride: int = 16
    temporal_stride: int = 4


@dataclass
class ModelConfig:
    # video expert (Wan2.2-TI2V-5B sizes; diffusers WanTransformer3DModel names)
    patch_size: tuple = (1, 2, 2)
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    ffn_dim: int = 14336
    freq_dim: int = 256
    text_dim: int = 4096
    num_layers: int = 30
    eps: float = 1e-6
    cross_attn_norm: bool = True
    qk_norm: str = "rms_norm_across_heads"
    rope_max_seq_len: int = 1024
    # action expert
    action_hidden: int = 1024
    action_ffn_dim: int = 4096
    use_action_expert: bool = True
    # how the actions reach the video (beyond the paper, after IRASim and the 1X challenge's adaLN-Zero state
    # conditioning): "expert" — the paper's action expert, joint attention with the video tokens —, "frame" — each
    # future latent frame's own actions (4·data.frame_stride of them) modulate that frame's adaLN in every block
    # through a zero-initialised MLP (WorldModel.frame_actions), no action expert —, or "both"
    action_conditioning: str = "expert"
    # policy (SPEC §9): a full last action block, an action output head, and noised action tokens with their own
    # timestep; False is the world model (clean actions, a K/V-only last action block, no action output)
    action_head: bool = False
    # parameterisation: "velocity" (Wan2.2) or "x0" (predict the clean latent, returned as a velocity)
    parameterization: str = "velocity"
    tau_min: float = 0.05  # x0 parameterisation: u = (z(tau) - x0) / max(tau, tau_min)
    first_frame_skip: bool = False  # x0 parameterisation: zero-initialised gated skip from z_0 ("copy" at init)
    gradient_checkpointing: bool = False
    weights: Optional[str] = None  # local Wan2.2-TI2V-5B transformer weights (diffusers folder or original file)
    action_expert_weights: Optional[str] = None  # output of `simforcing model init-action-expert`
    vae: VAEConfig = field(default_factory=VAEConfig)
    text_encoder: Optional[str] = None  # local umT5 folder (transformers); None -> seeded small T5 (demo only)

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def has_action_expert(self) -> bool:
        """Whether the network has the action expert: ``use_action_expert`` and ``action_conditioning`` expert/both
        (``use_action_expert`` false with "expert": no action input at all, plain Wan2.2 for parity checks)."""
        return self.use_action_expert and self.action_conditioning != "frame"

    @property
    def has_frame_actions(self) -> bool:
        """Whether each latent frame's actions modulate its adaLN (``action_conditioning`` frame/both)."""
        return self.action_conditioning in ("frame", "both")


@dataclass
class FlowConfig:
    shift: float = 5.0
    num_train_timesteps: int = 1000
    t_sampling: str = "discrete"  # "discrete" (1,000 levels, diffusers) or "continuous" (authors' code)
    loss_weighting: str = "gaussian_bump"  # "uniform", "gaussian_bump" (authors' code) or "tau_squared" (x0 demo)


# how the actions reach the video (model.action_conditioning; WorldModel)
ACTION_CONDITIONINGS = ("expert", "frame", "both")
# where the simulation condition enters the real branch (conditioning.path; WorldModel)
CONDITION_PATHS = ("blocks", "concat", "both")


@dataclass
class ConditioningConfig:
    p: float = 0.7  # condition-retention probability of the gate g ~ Bernoulli(p)
    corrupt_prob: float = 0.4
    alpha_min: float = 0.5
    alpha_max: float = 0.9
    sigma_min: float = 0.1
    sigma_max: float = 0.3
    action_dropout: float = 0.1  # stage 1: actions of this fraction of samples dropped
    # what P_j reads (beyond the paper): "latent" — c itself (the paper) — or "motion" — (c_0, c_ℓ − c_0): each
    # future token's patch then shows where the simulated arm is and where it was (WorldModel._condition_patches)
    representation: str = "latent"
    # where the condition enters the real branch: "blocks" — the paper's multi-block residuals h_j += g·P_j(c) —,
    # "concat" (beyond the paper) — c's patches beside the noisy latent's at the input, as an extra zero-initialised
    # patch embedding of the condition channels (WorldModel.cond_embed), the P_j frozen at zero —, or "both"
    path: str = "blocks"


@dataclass
class LossConfig:
    fm_real: float = 0.5
    fm_sim: float = 0.05
    md_real: float = 0.25
    md_sim: float = 0.025
    value_real: float = 0.25  # value_distill only: ||z_hat^r - sg(z_hat^s)||^2
    value_sim: float = 0.025
    # beyond the paper: stage-2 terms weight a latent position 1 + arm_weight·(its share of arm pixels, where the arm
    # goes and where it was; losses.region_weight), from the windows' arm masks; 0 = every position alike (the paper)
    arm_weight: float = 0.0


@dataclass
class TrainConfig:
    method: str = "simforcing"
    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 1e-2
    warmup_frac: float = 0.05
    grad_clip: float = 1.0
    epochs: int = 20
    max_steps: Optional[int] = None  # stop after this many optimizer steps (overrides epochs when set)
    batch_size: int = 1  # per GPU
    seed: int = 42
    mixed_precision: str = "bf16"  # "bf16" (autocast where the device supports it) or "no"
    # single-process bf16 training stores the frozen teacher's linear/conv weights in bf16 once (the casts autocast
    # made on every teacher call; bit-identical outputs, half its memory: models.weights.store_autocast_weights)
    teacher_autocast_weights: bool = True
    ckpt_every: int = 500
    keep_last: int = 3
    log_every: int = 10
    device: str = "auto"  # "auto", "cpu", "cuda"
    threads: str = "auto"  # CPU threads: "auto" (all cores, fewer while other processes keep cores busy) or N
    # the step's network calls through torch.compile (training.compiled; a failure: one warning, then eager): "off",
    # "module", "regional" or "graphs" (COMPILE_MODES; true = module). Off: at the demo's sizes on a 2-core CPU it
    # makes a step ~1.2-1.35x faster but compiles for minutes from a cold cache, more than the demo's steps save
    # (docs/BENCHMARK.md); same function to float rounding, same random numbers. On one GPU: "graphs"
    compile: CompileMode = "off"
    # training on the model's own rollouts (against the drift of long rollouts; the paper has none): with this
    # probability per sample, the window's first frame is the model's own prediction of it from the previous chunk
    # (methods.own_first_frames), as a long rollout hands a chunk over; 0 = always the recorded frame
    rollout_prob: float = 0.0
    # stage 2, against the drift of long rollouts (beyond the paper, after GameNGen): the student's first latent is
    # noised to a level σ ~ U(0, context_noise) per sample and told that level (methods.context_noise); 0 = off
    context_noise: float = 0.0
    # stage 2, against drift (beyond the paper): each window's first frame blended with the pose of F − 1 frames
    # earlier, a ~ U(0, context_ghost) (methods.ghosted_first_frames; two-chunk windows); 0 = off
    context_ghost: float = 0.0


@dataclass
class SampleConfig:
    n_sim: int = 1  # N_s Euler steps of the simulation rollout
    n_real: int = 10  # N_r Euler steps of the real rollout
    w: float = 0.6  # simulation-guidance CFG weight
    mask_mode: str = "mask-file"  # "mask-file", "sam3", "paired-sim"
    sam3_path: Optional[str] = None
    seed: int = 0
    condition: str = "rollout"  # c: "rollout" (the simulation rollout, SPEC §5), "oracle" (the recorded sim video
    #                             of the window, encoded: an upper bound for analysis, not a sampler) or "render" (the
    #                             robot's digital twin renders the commanded actions: simforcing.twin)
    twin: str = "synthetic"  # the SimRenderer of condition=render: "synthetic" (the embedded benchmark's arm twin) or
    #                          a registered name (your robot's: simforcing.twin.register_renderer)
    # the sampler's network calls through torch.compile (simforcing.training.compiled: inductor, static shapes; a
    # compilation failure: one named warning, the call again eagerly with the same noise), a mode as train.compile's.
    # Off by default: on a 2-core CPU at the demo's sizes a window of one shape samples 1.5x faster after ~35 s of
    # compiling, but a rollout's calls come in several shapes and run slower than eager even from inductor's cache
    # (docs/notebook/benchmark.md, the `sample.compile` measurement). On one GPU: "graphs"
    compile: CompileMode = "off"


@dataclass
class EvalConfig:
    num_samples: int = 100
    include_first_frame: bool = False  # the given first frame is excluded from every metric by default
    windows_per_episode: int = 1  # evaluation windows per episode: 1 = the centre window; K = K evenly spaced starts
    probe: Optional[str] = None  # state-probe folder (`simforcing model fit-probe`): the action-following error
    probe_moving_threshold: float = 0.02  # "moving" frames: the arm is this far (state units) from frame 0
    action_control: bool = True  # with a probe: also sample each window with another window's actions
    lpips_weights: Optional[str] = None
    inception_weights: Optional[str] = None
    i3d_weights: Optional[str] = None


SAMPLE_CONDITIONS = ("rollout", "oracle", "render")
ROLLOUT_STATES = ("integrate", "probe")
SIM_CHAINS = ("continue", "remask")


@dataclass
class RolloutConfig:
    """Long-horizon rollouts (``simforcing rollout``, ``simforcing.rollout``): the world model run chunk after chunk,
    each chunk starting from the previous chunk's last generated frame. The paper is silent on all of it."""

    # the state input of every chunk after the first: "integrate" (the initial state plus the commanded actions,
    # below) or "probe" (read from the generated frames by the state probe eval.probe, chained chunk to chunk);
    # never the recorded state
    state: str = "integrate"
    # the simulation condition of every chunk after the first: "continue" (the student's own simulation chain,
    # from its own last frame: no segmentation of a generated frame) or "remask" (the generated real frame masked
    # by sample.mask_mode, as the first chunk's)
    sim_chain: str = "continue"
    # "integrate": action dims that are per-step deltas of the same state dims (the synthetic benchmark and Bridge:
    # end-effector position and orientation deltas) and action dims that set the same state dim (the gripper
    # command); state dims in neither keep their initial value
    delta_dims: tuple = (0, 1, 2, 3, 4, 5)
    absolute_dims: tuple = (6,)
    # beyond the paper, for a model trained with train.context_noise: the noise level every chunk after the first tells
    # the network its first latent (a generated frame) carries — the latent itself is not noised; 0 = a clean first
    # frame, as the first chunk's
    context_tau: float = 0.0


FEWSTEP_OBJECTIVES = ("trajectory", "progressive")


@dataclass
class FewStepConfig:
    """A few-step student of a trained world model (``simforcing distill``, ``simforcing.fewstep``): the same network,
    trained so that ``steps`` Euler steps of its conditional branch reproduce the teacher's guided sampler. A run
    with ``steps`` > 0 is a student (run kind ``fewstep``); 0: any other run."""

    steps: int = 0  # K: network evaluations of the real rollout per chunk (the simulation rollout keeps N_s)
    objective: str = "trajectory"  # "trajectory" (the teacher's ODE from the same noise) or "progressive" (the
    #                                teacher's steps over each student jump, from the data noised to its start)
    w: float = 0.6  # the teacher's guidance weight the student bakes in (its sampler's w)
    teacher_n_sim: int = 1  # the teacher's sampler the student reproduces: N_s (kept by the student) and N_r
    teacher_n_real: int = 10
    sim_weight: float = 1.0  # weight of the term that keeps the simulation rollout the teacher's


POLICY_SETTINGS = ("action_only", "unconditional", "video_action")
POLICY_INIT_FROM = ("all", "video")


@dataclass
class PolicyConfig:
    """Downstream policy (SPEC §9; ``simforcing policy train|eval``). The action chunk is the window's actions
    (``data.actions_per_window``); the policy network is the world model built with ``model.action_head``."""

    setting: str = "action_only"  # "action_only" | "unconditional" | "video_action"
    execute: int = 10  # actions of each chunk executed before re-planning (FastWAM: 10 of 32); capped at the chunk
    flow_steps: int = 10  # Euler steps per chunk at inference (actions; video + action: both)
    t_sampling: str = "continuous"  # action flow times: "continuous" (FastWAM) or "discrete"
    loss_weighting: str = "gaussian_bump"  # action FM per-timestep weight: "gaussian_bump" or "uniform"
    video_loss: float = 1.0  # weight of the video FM term (first latent excluded), settings with video
    action_loss: float = 1.0  # weight of the action FM term
    cameras: int = 2  # external + wrist, side by side (data.width is the concatenated width)
    init_from: str = "all"  # with --init RUN: "all" (both experts) or "video" (the video expert only; the action
    # side keeps the policy's own initialisation, as from a video base: what a world model's video expert alone gives)


@dataclass
class Config:
    preset: str = "bridge"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    conditioning: ConditioningConfig = field(default_factory=ConditioningConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    fewstep: FewStepConfig = field(default_factory=FewStepConfig)

    # -- derived sizes ------------------------------------------------------------------------------------------------
    @property
    def latent_frames(self) -> int:
        """L + 1 latent frames for F = 1 + 4L frames."""
        return (self.data.frames - 1) // self.model.vae.temporal_stride + 1

    @property
    def latent_hw(self) -> tuple[int, int]:
        """The latent grid of the model's frame (every view side by side: ``data.frame_hw``)."""
        s = self.model.vae.spatial_stride
        h, w = self.data.frame_hw
        return h // s, w // s

    @property
    def tokens_per_latent_frame(self) -> int:
        h, w = self.latent_hw
        return (h // self.model.patch_size[1]) * (w // self.model.patch_size[2])

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def save(self, path: str | Path) -> None:
        from simforcing.utils import atomic_write_text  # utils imports torch: kept out of `import simforcing.cli`

        atomic_write_text(Path(path), self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "Config":
        return _from_dict(cls, d, source)

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot read the config ({e}); expected the JSON written by a run") from e
        if not isinstance(d, dict):
            raise ConfigError(f"{path}: the config is a JSON {type(d).__name__}; expected an object")
        return cls.from_dict(d, source=str(path))

    def validate(self) -> "Config":
        """Cross-field checks; raises ConfigError naming the field, the value and what is allowed."""
        self._validate_data_model_flow()
        self._validate_conditioning_loss()
        self._validate_train()
        self._validate_sample_eval()
        self._validate_policy_rollout()
        return self

    def _validate_data_model_flow(self) -> None:
        d, m, v = self.data, self.model, self.model.vae
        _check(d.frames >= 1 + v.temporal_stride and (d.frames - 1) % v.temporal_stride == 0, "data.frames",
               d.frames, f"1 + {v.temporal_stride}·L with L >= 1 (e.g. 5, 9, 21, 33)")
        _check(d.frame_stride >= 1, "data.frame_stride", d.frame_stride, "an integer >= 1")
        step = v.spatial_stride * m.patch_size[1]
        _check(d.height > 0 and d.height % step == 0, "data.height", d.height,
               f"a positive multiple of {step} (VAE spatial stride {v.spatial_stride} × patch {m.patch_size[1]})")
        step_w = v.spatial_stride * m.patch_size[2]
        _check(d.width > 0 and d.width % step_w == 0, "data.width", d.width,
               f"a positive multiple of {step_w} (VAE spatial stride {v.spatial_stride} × patch {m.patch_size[2]})")
        check_views(d.views, "data.views")
        _check(d.view_layout in VIEW_LAYOUTS, "data.view_layout", d.view_layout,
               "'width' (the views side by side) or 'height' (stacked)")
        _check(d.windows_per_episode >= 1, "data.windows_per_episode", d.windows_per_episode, "an integer >= 1")
        _check(d.action_dim >= 1 and d.state_dim >= 1, "data.action_dim", d.action_dim, "positive dimensions")
        _check(v.kind in ("wan", "demo"), "model.vae.kind", v.kind, "'wan' or 'demo'")
        _check(m.parameterization in ("velocity", "x0"), "model.parameterization", m.parameterization,
               "'velocity' or 'x0'")
        _check(len(m.patch_size) == 3, "model.patch_size", m.patch_size, "three integers (t, h, w)")
        _check(m.num_attention_heads > 0 and m.attention_head_dim > 0, "model.num_attention_heads",
               m.num_attention_heads, "positive")
        _check(m.num_layers >= 1, "model.num_layers", m.num_layers, "an integer >= 1")
        _check(m.action_conditioning in ACTION_CONDITIONINGS, "model.action_conditioning", m.action_conditioning,
               "'expert' (the paper's action expert), 'frame' (per-frame adaLN) or 'both'")
        _check(m.use_action_expert or m.action_conditioning != "both", "model.action_conditioning",
               m.action_conditioning, "'frame' or 'expert' with model.use_action_expert false ('both' needs the "
               "action expert)")
        _check(not m.action_head or m.action_conditioning == "expert", "model.action_conditioning",
               m.action_conditioning, "'expert' with model.action_head (a policy predicts its actions; its video "
               "tokens never read them)")
        _check(self.flow.shift > 0, "flow.shift", self.flow.shift, "a positive number")
        _check(self.flow.t_sampling in ("discrete", "continuous"), "flow.t_sampling", self.flow.t_sampling,
               "'discrete' or 'continuous'")
        _check(self.flow.loss_weighting in ("uniform", "gaussian_bump", "tau_squared"), "flow.loss_weighting",
               self.flow.loss_weighting, "'uniform', 'gaussian_bump' or 'tau_squared'")

    def _validate_conditioning_loss(self) -> None:
        c = self.conditioning
        for name in ("p", "corrupt_prob", "action_dropout"):
            val = getattr(c, name)
            _check(0.0 <= val <= 1.0, f"conditioning.{name}", val, "a probability in [0, 1]")
        _check(0 <= c.alpha_min <= c.alpha_max <= 1, "conditioning.alpha_min", (c.alpha_min, c.alpha_max),
               "0 <= alpha_min <= alpha_max <= 1")
        _check(0 <= c.sigma_min <= c.sigma_max, "conditioning.sigma_min", (c.sigma_min, c.sigma_max),
               "0 <= sigma_min <= sigma_max")
        _check(c.representation in ("latent", "motion"), "conditioning.representation", c.representation,
               "'latent' (the paper) or 'motion'")
        _check(c.path in CONDITION_PATHS, "conditioning.path", c.path,
               "'blocks' (the paper's P_j), 'concat' (at the input, channel-concatenated) or 'both'")
        for f in dataclasses.fields(self.loss):
            _check(getattr(self.loss, f.name) >= 0, f"loss.{f.name}", getattr(self.loss, f.name), ">= 0")

    def _validate_train(self) -> None:
        t = self.train
        _check(t.lr > 0, "train.lr", t.lr, "a positive learning rate (paper: 1e-4)")
        _check(0 <= t.warmup_frac < 1, "train.warmup_frac", t.warmup_frac, "in [0, 1)")
        _check(t.batch_size >= 1, "train.batch_size", t.batch_size, "an integer >= 1")
        _check(t.epochs >= 1, "train.epochs", t.epochs, "an integer >= 1")
        _check(t.max_steps is None or t.max_steps >= 1, "train.max_steps", t.max_steps, "None or >= 1")
        _check(t.mixed_precision in ("bf16", "no"), "train.mixed_precision", t.mixed_precision, "'bf16' or 'no'")
        _check(t.device in ("auto", "cpu", "cuda"), "train.device", t.device, "'auto', 'cpu' or 'cuda'")
        _check(t.keep_last >= 1, "train.keep_last", t.keep_last, "an integer >= 1")
        _check(str(t.threads).strip().lower() == "auto" or (str(t.threads).isdigit() and int(t.threads) >= 1),
               "train.threads", t.threads, "'auto' or an integer >= 1")
        _check(t.ckpt_every >= 1, "train.ckpt_every", t.ckpt_every, "an integer >= 1")
        compile_mode(t.compile, "train.compile")
        _check(0.0 <= t.rollout_prob <= 1.0, "train.rollout_prob", t.rollout_prob, "a probability in [0, 1]")
        _check(0.0 <= t.context_noise <= 1.0, "train.context_noise", t.context_noise, "a noise level in [0, 1]")
        _check(0.0 <= t.context_ghost <= 1.0, "train.context_ghost", t.context_ghost, "a blend weight in [0, 1]")
        _check(t.rollout_prob == 0 or not self.data.latent_cache, "train.rollout_prob", t.rollout_prob,
               "0 with data.latent_cache (training on the model's own rollouts decodes two chunks per window)")
        _check(t.method in METHOD_NAMES, "train.method", t.method, "one of " + ", ".join(METHOD_NAMES))
        f = self.fewstep
        _check(0 <= f.steps <= f.teacher_n_real, "fewstep.steps", f.steps,
               f"0 (not a student) or K in 1..fewstep.teacher_n_real ({f.teacher_n_real}), e.g. 1, 2 or 4")
        _check(f.objective in FEWSTEP_OBJECTIVES, "fewstep.objective", f.objective,
               "one of " + ", ".join(FEWSTEP_OBJECTIVES))
        _check(f.w >= 0 and f.teacher_n_sim >= 1 and f.sim_weight >= 0, "fewstep.w",
               (f.w, f.teacher_n_sim, f.sim_weight), "w >= 0, teacher_n_sim >= 1 and sim_weight >= 0")

    def _validate_sample_eval(self) -> None:
        s = self.sample
        _check(s.n_sim >= 1 and s.n_real >= 1, "sample.n_real", (s.n_sim, s.n_real), "step counts >= 1")
        _check(0.0 <= s.w, "sample.w", s.w, "a guidance weight >= 0 (paper: 0, 0.3, 0.6, 1)")
        _check(s.condition in SAMPLE_CONDITIONS, "sample.condition", s.condition,
               "'rollout', 'oracle' or 'render'")
        _check(s.mask_mode in ("mask-file", "sam3", "paired-sim"), "sample.mask_mode", s.mask_mode,
               "'mask-file', 'sam3' or 'paired-sim'")
        compile_mode(s.compile, "sample.compile")
        e = self.eval
        _check(e.windows_per_episode >= 1, "eval.windows_per_episode", e.windows_per_episode, "an integer >= 1")
        _check(e.probe_moving_threshold >= 0, "eval.probe_moving_threshold", e.probe_moving_threshold, ">= 0")
        if self.data.sim_background is not None:
            parse_color(self.data.sim_background, "data.sim_background")
        _check(self.data.pairing in (None, "arm", "scene"), "data.pairing", self.data.pairing,
               "'arm', 'scene' or null (the dataset's own)")

    def _validate_policy_rollout(self) -> None:
        p = self.policy
        _check(p.setting in POLICY_SETTINGS, "policy.setting", p.setting, "one of " + ", ".join(POLICY_SETTINGS))
        _check(p.execute >= 1, "policy.execute", p.execute,
               "an integer >= 1 (actions executed per predicted chunk; at most data.actions_per_window are)")
        _check(p.flow_steps >= 1, "policy.flow_steps", p.flow_steps, "an integer >= 1")
        _check(p.t_sampling in ("discrete", "continuous"), "policy.t_sampling", p.t_sampling,
               "'discrete' or 'continuous'")
        _check(p.loss_weighting in ("uniform", "gaussian_bump"), "policy.loss_weighting", p.loss_weighting,
               "'uniform' or 'gaussian_bump'")
        _check(p.video_loss >= 0 and p.action_loss >= 0, "policy.video_loss", (p.video_loss, p.action_loss), ">= 0")
        _check(p.cameras in (1, 2), "policy.cameras", p.cameras, "1 or 2")
        _check(p.init_from in POLICY_INIT_FROM, "policy.init_from", p.init_from, "'all' or 'video'")
        r = self.rollout
        _check(r.state in ROLLOUT_STATES, "rollout.state", r.state, "one of " + ", ".join(ROLLOUT_STATES))
        _check(r.sim_chain in SIM_CHAINS, "rollout.sim_chain", r.sim_chain, "one of " + ", ".join(SIM_CHAINS))
        _check(0.0 <= r.context_tau < 1.0, "rollout.context_tau", r.context_tau, "a noise level in [0, 1)")
        dims = list(r.delta_dims) + list(r.absolute_dims)
        _check(len(set(dims)) == len(dims) and all(i >= 0 for i in dims), "rollout.delta_dims",
               (r.delta_dims, r.absolute_dims), "distinct dims >= 0, each either a delta or an absolute dim (the "
               "rollout checks them against data.action_dim / state_dim)")


VIEW_LAYOUTS = ("width", "height")  # data.view_layout: how a model's views share its frame


def is_view_name(name: object) -> bool:
    """A view (camera) name: letters, digits, '_' or '-', 1 to 64 of them (it names files: ``sim_<view>.mp4``)."""
    return (isinstance(name, str) and 0 < len(name) <= 64
            and all(c.isascii() and (c.isalnum() or c in "_-") for c in name))


def check_views(views: Optional[str], field_name: str = "data.views") -> tuple[str, ...]:
    """The view names of a ``data.views`` value (None: ()), each a plain name (:func:`is_view_name`) and named once;
    ConfigError naming ``field_name`` otherwise."""
    if views is None:
        return ()
    names = [v.strip() for v in str(views).split(",")]
    bad = [v for v in names if not is_view_name(v)]
    if bad:
        raise ConfigError(f"{field_name}: got {views!r}; expected view names separated by commas, each letters, "
                          f"digits, '_' or '-' (e.g. external,wrist); {bad[0]!r} is not one")
    twice = sorted({v for v in names if names.count(v) > 1})
    if twice:
        raise ConfigError(f"{field_name}: got {views!r}; the view {twice[0]!r} is named twice (each camera once)")
    return tuple(names)


def parse_color(value: str, field_name: str = "data.sim_background") -> tuple[int, int, int]:
    """'black' -> (0, 0, 0); 'R,G,B' -> ints in 0..255."""
    if value == "black":
        return (0, 0, 0)
    try:
        rgb = tuple(int(x) for x in value.split(","))
    except ValueError:
        rgb = ()
    if len(rgb) != 3 or not all(0 <= x <= 255 for x in rgb):
        raise ConfigError(f"{field_name}: got {value!r}; expected 'black' or 'R,G,B' with integers in 0..255")
    return rgb  # type: ignore[return-value]


def config_diff(a: "Config", b: "Config") -> list[str]:
    """Dotted names of the fields that differ between two configs (sorted)."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    fa, fb = flat(json.loads(a.to_json())), flat(json.loads(b.to_json()))
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: got {value!r}; expected {allowed}")


# ----------------------------------------------------------------------------------------------------------------------
# Presets
# ----------------------------------------------------------------------------------------------------------------------


def _bridge() -> Config:
    """Bridge (SPEC §1, §7): 21 frames at 224×320, 20 actions, Wan2.2-TI2V-5B; one view, the external camera the
    paper's pairs were rendered for (``data.views`` None: a dataset's first camera)."""
    return Config(preset="bridge")


def _interndata_a1() -> Config:
    """InternData-A1: a 129-step window, every 4th frame -> 33 frames, all 128 actions; one view, the real camera
    the paper paired with its simulation rendering (the dataset's first camera)."""
    cfg = Config(preset="interndata_a1")
    cfg.data.frames = 33
    cfg.data.frame_stride = 4
    return cfg


INTERNDATA_A1_VIEWS = "head,wrist_left,wrist_right"  # its head camera and two wrist cameras (docs/REAL_SCALE.md)


def _interndata_a1_views() -> Config:
    """InternData-A1 with all its cameras (beyond the paper): the head camera and both wrist cameras, each 224×320,
    side by side in one 224×960 frame (``data.views``); import them with ``data import-lerobot --real-camera HEAD
    LEFT RIGHT --sim-camera ... --views head wrist_left wrist_right``."""
    cfg = _interndata_a1()
    cfg.preset = "interndata_a1_views"
    cfg.data.views = INTERNDATA_A1_VIEWS
    return cfg


def _demo() -> Config:
    """The laptop preset: the embedded synthetic benchmark, a small linear VAE and a tiny model on CPU.

    Choices that differ from the paper (all config fields, see docs/GUIDE.md "Configuration"):
    clean-latent parameterisation with a zero-initialised first-frame skip (a tiny velocity model gives speckled
    samples), loss weights (1, 0.5, 0.5, 0.25), τ² loss weighting (= clean-latent MSE), continuous t, lr 3e-3, fp32.
    """
    cfg = Config(preset="demo")
    d = cfg.data
    d.frames, d.height, d.width = 9, 32, 48
    d.windows_per_episode = 8
    d.cache_episodes = 1024  # ~50 MB of 32×48 frames: every episode is decoded once
    d.text_max_tokens = 64
    m = cfg.model
    m.vae = VAEConfig(kind="demo", path=None, latent_channels=64, spatial_stride=4, temporal_stride=4)  # K = 16
    m.num_attention_heads, m.attention_head_dim = 4, 32
    m.ffn_dim, m.freq_dim, m.text_dim, m.num_layers = 512, 64, 64, 4
    m.action_hidden, m.action_ffn_dim = 64, 256
    m.rope_max_seq_len = 64
    m.parameterization = "x0"
    m.first_frame_skip = True
    cfg.flow.t_sampling = "continuous"
    cfg.flow.loss_weighting = "tau_squared"  # clean-latent MSE: small-τ velocity errors would dominate otherwise
    cfg.loss = LossConfig(fm_real=1.0, fm_sim=0.5, md_real=0.5, md_sim=0.25, value_real=0.5, value_sim=0.25)
    t = cfg.train
    t.lr, t.batch_size, t.epochs, t.max_steps = 3e-3, 8, 1000, 600
    t.mixed_precision, t.device = "no", "cpu"
    t.ckpt_every, t.log_every, t.keep_last = 200, 10, 2
    cfg.eval.num_samples = 16
    cfg.policy.execute = 4  # of the 8-action chunk (FastWAM: 10 of 32), then re-plan
    # evaluated at the paper's sampler (N_s, N_r, w) = (1, 10, 0.6), like bridge/interndata_a1 (the defaults)
    return cfg


PRESETS = {"demo": _demo, "bridge": _bridge, "interndata_a1": _interndata_a1,
           "interndata_a1_views": _interndata_a1_views}


def preset(name: str) -> Config:
    if name not in PRESETS:
        raise ConfigError(f"--preset: unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
    return PRESETS[name]()


# ----------------------------------------------------------------------------------------------------------------------
# Overrides
# ----------------------------------------------------------------------------------------------------------------------


def parse_overrides(args: list[str]) -> dict[str, str]:
    """['--train.lr=3e-5', '--model.num_layers', '2'] -> {'train.lr': '3e-5', 'model.num_layers': '2'}."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or "." not in a.split("=", 1)[0]:
            raise ConfigError(f"unrecognised argument {a!r}; config overrides look like --section.field=value")
        key = a[2:]
        if "=" in key:
            key, val = key.split("=", 1)
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"--{key}: missing value")
            i += 1
            val = args[i]
        out[key] = val
        i += 1
    return out


def apply_overrides(cfg: Config, overrides: dict[str, Any]) -> Config:
    """Set dotted fields (strings are parsed by the field's type). Unknown fields raise ConfigError."""
    for key, raw in overrides.items():
        parts = key.split(".")
        obj: Any = cfg
        for j, p in enumerate(parts):
            if not dataclasses.is_dataclass(obj):
                raise ConfigError(f"--{key}: {'.'.join(parts[:j])} is not a section")
            names = {f.name: f for f in dataclasses.fields(obj)}
            if p not in names:
                where = ".".join(parts[:j]) or "config"
                raise ConfigError(f"--{key}: unknown field {p!r} in {where}; known: {', '.join(sorted(names))}")
            if j == len(parts) - 1:
                hints = typing.get_type_hints(type(obj))
                setattr(obj, p, _coerce(raw, hints[p], key))
            else:
                obj = getattr(obj, p)
    return cfg


def _coerce(raw: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null")):
            return None
        return _coerce(raw, inner[0], key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(raw, dict):
            raise ConfigError(f"--{key}: expected a section (mapping), got {raw!r}")
        return _from_dict(tp, raw, key.lstrip("-"))
    if tp is CompileMode:
        return compile_mode(raw, key if ":" in key else f"--{key}")
    try:
        if tp is bool:
            if isinstance(raw, bool):
                return raw
            s = str(raw).lower()
            if s in _TRUE or s in _FALSE:
                return s in _TRUE
            raise ValueError(raw)
        if tp is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(raw)
            return int(raw) if not isinstance(raw, str) else int(raw, 10)
        if tp is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw)
            if not math.isfinite(value):  # `--sample.w=inf` scored NaN; no setting means NaN or infinity
                where = key if ":" in key else f"--{key}"
                raise ConfigError(f"{where}: got {raw!r}; expected a finite number")
            return value
        if tp is str:
            if not isinstance(raw, str):
                raise ValueError(raw)
            return raw
        if tp is tuple or origin is tuple:
            if isinstance(raw, str):
                raw = [int(x) for x in raw.strip("()[] ").split(",")]
            return tuple(int(x) for x in raw)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        where = key if ":" in key else f"--{key}"
        raise ConfigError(f"{where}: cannot read {raw!r} as {name}") from None
    return raw


def _check_fields(cls: Any, d: dict, source: str) -> None:
    """A ConfigError naming the first key of ``d`` that is not a field of the dataclass ``cls``."""
    names = {f.name for f in dataclasses.fields(cls)}
    for k in d:
        if k not in names:
            raise ConfigError(f"{source}: unknown field {k!r} in {cls.__name__}; known: {', '.join(sorted(names))}")


def _from_dict(cls: Any, d: dict, source: str) -> Any:
    obj = cls()
    hints = typing.get_type_hints(cls)
    _check_fields(cls, d, source)
    for k, v in d.items():
        sub = f"{source}:{k}" if dataclasses.is_dataclass(hints[k]) else (f"{source}:{k}" if source != "config" else k)
        setattr(obj, k, _coerce(v, hints[k], sub))
    return obj


def record_from_dict(cls: Any, d: Any, source: str) -> Any:
    """A dataclass whose fields may be required (a state probe's or a success judge's network config) from a JSON
    object: an unknown, missing or ill-typed field is a ConfigError naming ``source``, the field and what it takes."""
    fields = dataclasses.fields(cls)
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: expected an object with the fields {', '.join(f.name for f in fields)}; got "
                          f"a JSON {type(d).__name__}")
    _check_fields(cls, d, source)
    missing = [f.name for f in fields if f.name not in d
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{source}: missing field {missing[0]!r} of {cls.__name__} (required: "
                          f"{', '.join(missing)})")
    hints = typing.get_type_hints(cls)
    return cls(**{k: _coerce(v, hints[k], f"{source}:{k}") for k, v in d.items()})


def load_config(preset_name: str, overrides: list[str] | dict | None = None) -> Config:
    cfg = preset(preset_name)
    if overrides:
        ov = parse_overrides(overrides) if isinstance(overrides, list) else overrides
        apply_overrides(cfg, ov)
    return cfg
