"""MJCF scenes of the synthetic benchmark: one robot arm, two renderings.

- ``real_xml(objects, appearance)``: the arm on a textured table in a room, task objects it can push or grasp,
  distractors with random colours, per-episode lights with shadows. All physics runs in this model;
  ``paint_textures`` then fills its table, wall and floor textures.
- ``sim_xml()``: the digital twin: the same arm (same geoms, same materials) alone, evenly lit, on a flat black
  background. It holds no physics of its own: the arm's joint positions are copied into it from the real model.
- ``sim_scene_xml(scene)``: the full-scene simulation (``data synth --pairing scene``, InternData-A1's kind of pair):
  the arm, a plain grey table and the same objects in flat colours, lit as ``sim_xml``, on black — with physics of
  its own whose object masses, sliding frictions, sizes and servo gains differ from the real scene's by a per-episode
  draw (:class:`SimScene`, :func:`draw_sim_scene`, the ranges :class:`PhysicsGap`).

The arm: a pedestal, 6 hinge joints (base yaw, shoulder, elbow and wrist pitch, wrist tilt, wrist roll) driven by
position servos, and a parallel gripper of two sliding fingers, with a wrist camera (``WRIST_CAMERA``) on the hand
looking past the fingertips (a camera adds no geometry: the free-camera renders of ``data synth`` are unchanged). Its geoms are named ``arm_*`` (the segmentation mask
selects them). The end-effector site ``ee`` sits between the fingertips; its frame equals the world frame when the
gripper points straight down with zero yaw, so its roll-pitch-yaw stays far from the ±π wrap.
World frame: table top at z = 0, robot base at the origin, +x away from the robot, +z up.
``sample_objects`` / ``sample_appearance`` / ``sample_camera`` draw one episode's scene from its generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

ARM_JOINTS = ("j1", "j2", "j3", "j4", "j5", "j6")
FINGER_JOINTS = ("finger_l", "finger_r")
FINGER_TRAVEL = 0.045  # m, each finger's slide range: opening = (q_l + q_r) / (2 · FINGER_TRAVEL) in [0, 1]
EE_SITE = "ee"
WRIST_CAMERA = "wrist"  # on the hand, behind the palm, looking past the fingertips (the policy's second camera)
ARM_GEOM_PREFIX = "arm_"
HOME_Q = (0.0, 0.35, 1.75, 1.04, 0.0, 0.0)  # elbow-up, gripper pointing down (pitches sum to π)
TIMESTEP = 0.001  # s, physics step (0.002 lets pinched objects spring away too often)
# The tessellation (numslices, numstacks) of every render's capsules, cylinders and spheres (MuJoCo's <visual><quality>):
# half of MuJoCo's default. At the benchmark's resolutions the frames are the same to within a few edge pixels (32×48:
# ~2 % of the twin's pixels, ≤ 13 of 255 levels; 0.7 % of a real frame's, ≤ 4) while a software rasteriser draws
# each frame 2–3× faster (docs/notebook/benchmark.md). Generator version 5; the twin record names it ("mesh"), and a
# record without one (generator ≤ 4) was rendered at MuJoCo's default.
MESH = (14, 8)
DEFAULT_MESH = (28, 16)
# Reach (m): shoulder joint height, wrist joint above the ee site when the gripper points down, upper + fore arm.
SHOULDER_Z, WRIST_ABOVE_EE, ARM_REACH = 0.16, 0.125, 0.62

# Named colours of the task objects (the instruction names them).
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.12, 0.1), "green": (0.15, 0.7, 0.2), "blue": (0.12, 0.3, 0.9),
    "yellow": (0.95, 0.85, 0.1), "purple": (0.55, 0.2, 0.75), "orange": (1.0, 0.5, 0.05),
}
# Task-object shapes: MJCF geom type and half-sizes (m).
SHAPES: dict[str, tuple[str, tuple[float, ...]]] = {
    "block": ("box", (0.045, 0.025, 0.025)),
    "cube": ("box", (0.025, 0.025, 0.025)),
    "ball": ("sphere", (0.028,)),
    "cylinder": ("cylinder", (0.022, 0.03)),
}


@dataclass
class SceneObject:
    """A free body on the table. ``size`` are MJCF half-sizes; ``pos`` is (x, y) on the table."""

    name: str
    shape: str  # key of SHAPES, or "box" / "cylinder" for distractors
    geom: str  # MJCF geom type
    size: tuple[float, ...]
    rgb: tuple[float, float, float]
    pos: tuple[float, float]
    yaw: float
    colour: str = ""  # named colour ("" for distractors)
    mass: float = 0.06
    friction: tuple[float, float, float] | None = None  # (sliding, torsional, rolling); None: ``object_friction``

    @property
    def height(self) -> float:
        """Half-height above the table (z of the body centre when resting)."""
        return self.size[0] if self.geom == "sphere" else self.size[-1]


@dataclass
class Appearance:
    """Per-episode look of the real scene (textures are painted by ``paint_textures``)."""

    headlight: float  # ambient = diffuse scale of the camera headlight
    lights: list[dict] = field(default_factory=list)  # {"pos": (3,), "dir": (3,), "rgb": (3,)}
    skybox: tuple[tuple[float, float, float], tuple[float, float, float]] = ((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))


def _f(v) -> str:
    return " ".join(f"{float(x):.5g}" for x in np.atleast_1d(v))


def _arm_xml() -> str:
    """The arm's body tree (shared verbatim by the sim and real models)."""
    g = 'contype="2" conaffinity="0"'
    return f"""
    <geom name="arm_pedestal" type="cylinder" size="0.075 0.03" pos="0 0 0.03" material="arm_dark" {g}/>
    <body name="link1" pos="0 0 0.06" gravcomp="1">
      <joint name="j1" axis="0 0 1" range="-2.6 2.6"/>
      <geom name="arm_l1" type="capsule" fromto="0 0 0 0 0 0.1" size="0.048" material="arm_white" mass="1.0" {g}/>
      <body name="link2" pos="0 0 0.1" gravcomp="1">
        <joint name="j2" axis="0 1 0" range="-1.2 1.7"/>
        <geom name="arm_shoulder" type="cylinder" fromto="0 -0.05 0 0 0.05 0" size="0.045" material="arm_accent"
              mass="0.3" {g}/>
        <geom name="arm_upper" type="capsule" fromto="0 0 0 0 0 0.32" size="0.038" material="arm_white" mass="0.8"
              {g}/>
        <body name="link3" pos="0 0 0.32" gravcomp="1">
          <joint name="j3" axis="0 1 0" range="-0.2 2.7"/>
          <geom name="arm_elbow" type="cylinder" fromto="0 -0.042 0 0 0.042 0" size="0.04" material="arm_accent"
                mass="0.2" {g}/>
          <geom name="arm_fore" type="capsule" fromto="0 0 0 0 0 0.3" size="0.032" material="arm_white"
                mass="0.5" {g}/>
          <body name="link4" pos="0 0 0.3" gravcomp="1">
            <joint name="j4" axis="0 1 0" range="-0.8 2.6"/>
            <geom name="arm_wrist" type="cylinder" fromto="0 -0.034 0 0 0.034 0" size="0.033" material="arm_accent"
                  mass="0.1" {g}/>
            <geom name="arm_wrist_link" type="capsule" fromto="0 0 0 0 0 0.035" size="0.028" material="arm_white"
                  mass="0.1" {g}/>
            <body name="link5" pos="0 0 0.04" gravcomp="1">
              <joint name="j5" axis="1 0 0" range="-1.2 1.2"/>
              <inertial pos="0 0 0" mass="0.05" diaginertia="2e-5 2e-5 2e-5"/>
              <body name="hand" pos="0 0 0" gravcomp="1">
                <joint name="j6" axis="0 0 1" range="-2.8 2.8"/>
                <geom name="arm_flange" type="cylinder" size="0.03 0.008" pos="0 0 0.004" material="arm_dark"
                      mass="0.05" {g}/>
                <geom name="arm_palm" type="box" size="0.022 0.068 0.014" pos="0 0 0.022" material="arm_dark"
                      mass="0.15" {g}/>
                <site name="{EE_SITE}" pos="0 0 0.085" quat="0 0 1 0" size="0.005"/>
                <camera name="{WRIST_CAMERA}" pos="-0.06 0 0" xyaxes="0 1 0 0.894 0 -0.447" fovy="80"/>
                <body name="finger_l" pos="0 0.01 0.036" gravcomp="1">
                  <joint name="finger_l" type="slide" axis="0 1 0" range="0 {FINGER_TRAVEL}" damping="2"/>
                  <geom name="arm_finger_l" type="box" size="0.012 0.009 0.032" pos="0 0 0.032"
                        material="arm_finger" mass="0.03" friction="1.5 0.02 0.001" condim="4" {g}/>
                </body>
                <body name="finger_r" pos="0 -0.01 0.036" gravcomp="1">
                  <joint name="finger_r" type="slide" axis="0 -1 0" range="0 {FINGER_TRAVEL}" damping="2"/>
                  <geom name="arm_finger_r" type="box" size="0.012 0.009 0.032" pos="0 0 0.032"
                        material="arm_finger" mass="0.03" friction="1.5 0.02 0.001" condim="4" {g}/>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


ARM_MATERIALS = """
    <material name="arm_white" rgba="0.82 0.83 0.85 1" specular="0.3" shininess="0.4"/>
    <material name="arm_accent" rgba="0.95 0.5 0.12 1" specular="0.3" shininess="0.4"/>
    <material name="arm_dark" rgba="0.42 0.44 0.48 1" specular="0.2" shininess="0.3"/>
    <material name="arm_finger" rgba="0.55 0.58 0.62 1" specular="0.2" shininess="0.3"/>"""

# Position servos: (kp, kv) per arm joint; the fingers share one command (opening in [0, 1] -> metres).
SERVO_GAINS = ((900, 60), (1500, 90), (1000, 60), (400, 20), (200, 10), (120, 6))
FINGER_GAINS = (150, 8)


def _actuators_xml(gains=SERVO_GAINS, finger=FINGER_GAINS) -> str:
    arm = "".join(f'\n    <position name="a_{j}" joint="{j}" kp="{kp:.6g}" kv="{kv:.6g}"/>' for j, (kp, kv) in
                  zip(ARM_JOINTS, gains))
    fingers = "".join(f'\n    <position name="a_{j}" joint="{j}" kp="{finger[0]:.6g}" kv="{finger[1]:.6g}" '
                      f'ctrlrange="0 {FINGER_TRAVEL}"/>' for j in FINGER_JOINTS)
    return f"<actuator>{arm}{fingers}\n  </actuator>"


def _quality_xml(mesh: tuple[int, int], extra: str = "") -> str:
    return f'<quality{extra} numslices="{int(mesh[0])}" numstacks="{int(mesh[1])}"/>'


def _sim_model_xml(model: str, world: str, actuators: str, assets: str = "", mesh: tuple[int, int] = MESH) -> str:
    """A simulation-domain model: evenly lit by the headlight and one shadowless key light, black where nothing is
    (no skybox, floor or shadows), the real scene's timestep and integrator; ``world`` after the key light; its round
    geoms tessellated at ``mesh`` (:data:`MESH`)."""
    return f"""<mujoco model="{model}">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast"/>
  <visual>
    <global offwidth="640" offheight="480"/>
    {_quality_xml(mesh)}
    <headlight ambient="0.45 0.45 0.45" diffuse="0.45 0.45 0.45" specular="0.05 0.05 0.05"/>
    <rgba haze="0 0 0 1"/>
  </visual>
  <asset>{ARM_MATERIALS}{assets}
  </asset>
  <worldbody>
    <light name="key" directional="true" dir="0.3 0.2 -1" diffuse="0.35 0.35 0.35" specular="0 0 0"
           castshadow="false"/>{world}
  </worldbody>
  {actuators}
</mujoco>
"""


def sim_xml(mesh: tuple[int, int] = MESH) -> str:
    """The digital twin: the arm alone, evenly lit, flat black background (no skybox, floor or shadows), with the real
    scene's servos and integrator, so that it renders the simulation videos (``generate.TwinRenderer``: joint positions
    set, no physics) and runs the benchmark's controller on its own (``twin.SyntheticTwin``: the actions' physics, no
    objects). Actuators are invisible: the renders do not depend on them. ``mesh``: the tessellation the episode's
    simulation video was rendered with (its twin record's; :data:`MESH` since generator version 5)."""
    return _sim_model_xml("simforcing-synth-sim", _arm_xml(), _actuators_xml(), mesh=mesh)


def object_friction(geom: str) -> tuple[float, float, float]:
    """The real scene's (sliding, torsional, rolling) friction of an object of MJCF type ``geom``: low sliding friction
    (MuJoCo takes the larger of a pair's: 0.4 on the table, the fingers' 1.5 in a grasp) lets pushed objects slide
    instead of tipping over and wedging under the fingers; rolling friction keeps spheres and cylinders from rolling
    off the table."""
    return (0.4, 0.02, 0.006) if geom in ("sphere", "cylinder") else (0.4, 0.02, 0.001)


def _object_xml(o: SceneObject, material: str = "") -> str:
    z = o.height + 0.0005
    qw, qz = np.cos(o.yaw / 2), np.sin(o.yaw / 2)
    condim = 6 if o.geom in ("sphere", "cylinder") else 4
    extra = f' condim="{condim}" friction="{_f(o.friction or object_friction(o.geom))}"'
    return f"""
    <body name="{o.name}" pos="{_f(o.pos)} {z:.5g}" quat="{qw:.6g} 0 0 {qz:.6g}">
      <freejoint/>
      <geom name="{o.name}" type="{o.geom}" size="{_f(o.size)}" rgba="{_f(o.rgb)} 1" mass="{o.mass:.4g}"
            contype="1" conaffinity="3"{extra}{f' material="{material}"' if material else ""}/>
    </body>"""


# ----------------------------------------------------------------------------------------------------------------------
# The full-scene simulation (``data synth --pairing scene``): the same objects, plain, with physics of its own
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhysicsGap:
    """How far the full-scene simulation's physics lies from the real scene's at ``data synth --physics-gap 1``; the
    scale S multiplies every range (0: the real scene's physics). Each object and each servo draws its own u ~ U(−1, 1)
    per parameter (:func:`draw_sim_scene`):

    - ``mass``: an object's mass × mass^(S·u) — at S = 1 between half and twice the real one;
    - ``friction``: its sliding friction × friction^(S·u) — 0.23 … 0.7 for the real 0.4 (torsional and rolling
      friction stay the real ones);
    - ``size``: its half-sizes × (1 + size·S·u) — ± 15 %, so it also rests at another height and fits the gripper
      otherwise;
    - ``servo``: each position servo's kp and kv, independently, × servo^(S·u) — 2/3 … 1.5, the six arm joints and the
      fingers: the arm lags, overshoots and grips otherwise than the real one under the same controller (whose
      velocity feed-forward stays the nominal gains', as a real controller tuned for its robot would).
    """

    mass: float = 2.0
    friction: float = 1.75
    size: float = 0.15
    servo: float = 1.5


PHYSICS_GAP = PhysicsGap()
SIM_TABLE_RGBA = "0.6 0.6 0.6 1"
# sliding friction low, so that an object's contacts with the table slide with the object's own (MuJoCo takes a pair's
# larger value: the real table's 0.4 would hide the drawn friction); torsional and rolling the real table's, so at
# --physics-gap 0 every contact pair has the real scene's friction
SIM_TABLE_FRICTION = "0.01 0.02 0.001"
SIM_OBJECT_MATERIAL = '\n    <material name="plain" specular="0.05" shininess="0.1"/>'


@dataclass
class SimScene:
    """One episode's full-scene simulation: its objects (the real scene's poses, colours and shapes; its own mass,
    sliding friction and size), its servos' gains, the gap scale they were drawn at and the draws themselves
    (``factors``: per object {"mass", "friction", "size"}, per servo [kp, kv] multipliers, the fingers' last). What
    the episode's ``twin.json`` holds under ``scene`` (:meth:`to_record`), enough to rebuild the model
    (:func:`sim_scene_xml`)."""

    objects: list[SceneObject]
    servo_gains: tuple[tuple[float, float], ...]
    finger_gains: tuple[float, float]
    physics_gap: float
    factors: dict

    def to_record(self) -> dict:
        objects = [{"name": o.name, "shape": o.shape, "geom": o.geom, "colour": o.colour,
                    "size": [float(v) for v in o.size], "rgb": [float(v) for v in o.rgb],
                    "pos": [float(v) for v in o.pos], "yaw": float(o.yaw), "mass": float(o.mass),
                    "friction": [float(v) for v in (o.friction or object_friction(o.geom))]} for o in self.objects]
        return {"objects": objects, "servo_gains": [[float(kp), float(kv)] for kp, kv in self.servo_gains],
                "finger_gains": [float(v) for v in self.finger_gains], "physics_gap": float(self.physics_gap),
                "factors": self.factors}

    @classmethod
    def from_record(cls, scene: dict) -> "SimScene":
        """The scene of a checked record (``data.twin_episode.check_synthetic_scene``)."""
        objects = [SceneObject(name=o["name"], shape=o["shape"], geom=o["geom"], size=tuple(o["size"]),
                               rgb=tuple(o["rgb"]), pos=tuple(o["pos"]), yaw=float(o["yaw"]),
                               colour=o.get("colour", ""), mass=float(o["mass"]), friction=tuple(o["friction"]))
                   for o in scene["objects"]]
        return cls(objects, tuple(tuple(g) for g in scene["servo_gains"]), tuple(scene["finger_gains"]),
                   float(scene.get("physics_gap", 0.0)), dict(scene.get("factors") or {}))


def draw_sim_scene(objects: list[SceneObject], rng: np.random.Generator, scale: float,
                   gap: PhysicsGap = PHYSICS_GAP) -> SimScene:
    """The simulation of a scene of ``objects`` at gap ``scale`` (:class:`PhysicsGap`): 3 draws per object (mass,
    friction, size), then 2 per servo (kp, kv; the six arm joints, then the fingers), always the same number whatever
    the scale, so that scales share their directions and 0 gives the real scene's values exactly."""
    u = rng.uniform(-1.0, 1.0, size=(len(objects), 3))
    v = rng.uniform(-1.0, 1.0, size=(len(SERVO_GAINS) + 1, 2))
    s = float(scale)
    own, per_object = [], []
    for o, (um, uf, us) in zip(objects, u):
        fm, ff, fs = (float(x) for x in (gap.mass ** (s * um), gap.friction ** (s * uf), 1.0 + gap.size * s * us))
        sliding, torsional, rolling = object_friction(o.geom)
        own.append(replace(o, size=tuple(float(x) * fs for x in o.size), mass=float(o.mass) * fm,
                           friction=(sliding * ff, torsional, rolling)))
        per_object.append({"mass": fm, "friction": ff, "size": fs})
    servo = gap.servo ** (s * v)  # (7, 2): kp, kv multipliers
    gains = tuple((kp * float(a), kv * float(b)) for (kp, kv), (a, b) in zip(SERVO_GAINS, servo[:-1]))
    finger = (FINGER_GAINS[0] * float(servo[-1, 0]), FINGER_GAINS[1] * float(servo[-1, 1]))
    return SimScene(own, gains, finger, s, {"objects": per_object, "servo": servo.tolist()})


def sim_scene_xml(scene: SimScene, mesh: tuple[int, int] = MESH) -> str:
    """The full-scene simulation model (module docstring): the arm, a plain grey table where the real one stands (its
    legs, the wall and the floor unseen; a floor of the real one's friction below, hidden, catches what falls), the
    scene's objects in their flat colours (matte), the scene's servo gains."""
    objs = "".join(_object_xml(o, "plain") for o in scene.objects)
    world = f"""
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.75" group="3" contype="1" conaffinity="3"/>
    <geom name="table" type="box" size="0.48 0.6 0.03" pos="0.3 0 -0.03" rgba="{SIM_TABLE_RGBA}" contype="1"
          conaffinity="3" friction="{SIM_TABLE_FRICTION}"/>{_arm_xml()}{objs}"""
    return _sim_model_xml("simforcing-synth-sim-scene", world, _actuators_xml(scene.servo_gains, scene.finger_gains),
                          SIM_OBJECT_MATERIAL, mesh)


def _light_xml(i: int, light: dict) -> str:
    return (f'\n    <light name="light{i}" pos="{_f(light["pos"])}" dir="{_f(light["dir"])}" '
            f'diffuse="{_f(light["rgb"])}" specular="0.2 0.2 0.2" castshadow="true" cutoff="70" exponent="2"/>')


def real_xml(objects: list[SceneObject], look: Appearance) -> str:
    """The full real scene around the same arm. Table, wall and floor textures are flat here and painted after
    compilation (``paint_textures``), so that every pixel comes from the episode's own random generator."""
    h = look.headlight
    lights = "".join(_light_xml(i, li) for i, li in enumerate(look.lights))
    objs = "".join(_object_xml(o) for o in objects)
    sky1, sky2 = look.skybox
    return f"""<mujoco model="simforcing-synth-real">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast"/>
  <visual>
    <global offwidth="640" offheight="480"/>
    {_quality_xml(MESH, ' shadowsize="256"')}
    <headlight ambient="{h:.3g} {h:.3g} {h:.3g}" diffuse="{h:.3g} {h:.3g} {h:.3g}" specular="0.05 0.05 0.05"/>
  </visual>
  <asset>{ARM_MATERIALS}
    <texture name="sky" type="skybox" builtin="gradient" rgb1="{_f(sky1)}" rgb2="{_f(sky2)}" width="64" height="64"/>
    <texture name="tex_table" type="2d" builtin="flat" rgb1="1 1 1" width="128" height="128"/>
    <texture name="tex_wall" type="2d" builtin="flat" rgb1="1 1 1" width="128" height="128"/>
    <texture name="tex_floor" type="2d" builtin="flat" rgb1="1 1 1" width="128" height="128"/>
    <material name="table" texture="tex_table" texrepeat="1 1" specular="0.15" shininess="0.2"/>
    <material name="wall" texture="tex_wall" texrepeat="1 1" specular="0.05"/>
    <material name="floor" texture="tex_floor" texrepeat="3 3" specular="0.05"/>
  </asset>
  <worldbody>{lights}
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.75" material="floor" contype="1" conaffinity="3"/>
    <geom name="wall" type="box" size="0.02 1.6 1.0" pos="-0.6 0 0.1" material="wall" contype="0" conaffinity="0"/>
    <geom name="table" type="box" size="0.48 0.6 0.03" pos="0.3 0 -0.03" material="table" contype="1"
          conaffinity="3" friction="0.4 0.02 0.001"/>
    <geom name="table_leg1" type="box" size="0.03 0.03 0.36" pos="0.72 0.52 -0.39" rgba="0.25 0.2 0.15 1"
          contype="0" conaffinity="0"/>
    <geom name="table_leg2" type="box" size="0.03 0.03 0.36" pos="0.72 -0.52 -0.39" rgba="0.25 0.2 0.15 1"
          contype="0" conaffinity="0"/>{_arm_xml()}{objs}
  </worldbody>
  {_actuators_xml()}
</mujoco>
"""


# ----------------------------------------------------------------------------------------------------------------------
# Textures (painted into model.tex_data before a renderer uploads them)
# ----------------------------------------------------------------------------------------------------------------------


def _wood(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, n, 3) float in [0, 1]: wood grain along one axis."""
    base = rng.uniform([0.45, 0.28, 0.12], [0.8, 0.6, 0.38])
    y = np.linspace(0, 1, n)[:, None]
    x = np.linspace(0, 1, n)[None, :]
    warp = 0.04 * np.sin(2 * np.pi * (rng.uniform(1, 3) * x + rng.uniform(0, 1)))
    grain = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(6, 14) * (y + warp))
    shade = 1.0 - rng.uniform(0.15, 0.35) * grain
    return base[None, None, :] * shade[..., None]


def _cloth(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, n, 3): a two-colour checked table cloth."""
    c1, c2 = rng.uniform(0.15, 0.9, size=3), rng.uniform(0.15, 0.9, size=3)
    k = int(rng.integers(3, 7))
    i = (np.arange(n) * k // n)
    check = ((i[:, None] + i[None, :]) % 2).astype(np.float64)
    return c1 * check[..., None] + c2 * (1 - check[..., None])


def _stripes(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, n, 3): striped wallpaper with a vertical brightness gradient."""
    c1, c2 = rng.uniform(0.2, 0.95, size=3), rng.uniform(0.2, 0.95, size=3)
    k = int(rng.integers(4, 10))
    s = ((np.arange(n) * k // n) % 2).astype(np.float64)[None, :, None]
    grad = np.linspace(0.75, 1.1, n)[:, None, None]
    return np.clip((c1 * s + c2 * (1 - s)) * grad, 0, 1)


def _tiles(rng: np.random.Generator, n: int) -> np.ndarray:
    c = rng.uniform(0.2, 0.7, size=3)
    k = int(rng.integers(4, 9))
    i = np.arange(n) * k
    grout = ((i % n) < k * 3)[:, None] | ((i % n) < k * 3)[None, :]
    return c * np.where(grout, 0.6, 1.0)[..., None] * np.ones((n, n, 1))


def paint_textures(model, rng: np.random.Generator) -> None:
    """Fill the real model's table, wall and floor textures with random patterns plus per-texel noise."""
    import mujoco  # not at the top: generate.py sets MUJOCO_GL before MuJoCo's first import (package docstring)

    for name, painter in (("tex_table", _wood if rng.random() < 0.6 else _cloth), ("tex_wall", _stripes),
                          ("tex_floor", _tiles)):
        tid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXTURE, name)
        h, w, c = int(model.tex_height[tid]), int(model.tex_width[tid]), int(model.tex_nchannel[tid])
        if h != w or c < 3:
            raise ValueError(f"texture {name}: expected a square RGB(A) texture, found {h}x{w}x{c}")
        img = painter(rng, h) + rng.normal(0, 0.03, size=(h, w, 3))
        rgb = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
        if c == 4:
            rgb = np.concatenate([rgb, np.full((h, w, 1), 255, np.uint8)], axis=-1)
        adr = int(model.tex_adr[tid])
        model.tex_data[adr: adr + h * w * c] = rgb.reshape(-1)


# ----------------------------------------------------------------------------------------------------------------------
# Per-episode randomisation: objects, appearance, camera
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class CameraPose:
    """A free camera looking at ``lookat`` (shared by the sim and real renders of an episode)."""

    lookat: tuple[float, float, float]
    distance: float
    azimuth: float  # degrees
    elevation: float  # degrees

    def to_mjv(self):
        import mujoco  # not at the top: generate.py sets MUJOCO_GL before MuJoCo's first import (package docstring)

        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.lookat[:] = self.lookat
        cam.distance, cam.azimuth, cam.elevation = self.distance, self.azimuth, self.elevation
        return cam


NOMINAL_CAMERA = CameraPose(lookat=(0.27, 0.0, 0.23), distance=1.05, azimuth=215.0, elevation=-32.0)


def sample_camera(rng: np.random.Generator) -> CameraPose:
    """The nominal camera with a small per-episode pose jitter."""
    c = NOMINAL_CAMERA
    return CameraPose(lookat=tuple(np.asarray(c.lookat) + rng.normal(0, 0.015, 3)),
                      distance=c.distance + float(rng.normal(0, 0.04)),
                      azimuth=c.azimuth + float(rng.normal(0, 3.0)),
                      elevation=c.elevation + float(rng.normal(0, 2.0)))


def _place(rng: np.random.Generator, taken: list[tuple[float, float, float]], radius: float,
           lo: tuple[float, float], hi: tuple[float, float]) -> tuple[float, float]:
    """Rejection-sample an (x, y) whose disc of ``radius`` clears every taken disc (x, y, r)."""
    for _ in range(200):
        x, y = rng.uniform(lo, hi)
        if all((x - a) ** 2 + (y - b) ** 2 > (radius + r + 0.03) ** 2 for a, b, r in taken):
            taken.append((x, y, radius))
            return float(x), float(y)
    raise RuntimeError(f"could not place an object of radius {radius:.3f} in x {lo[0]}..{hi[0]}, "
                       f"y {lo[1]}..{hi[1]} clear of {len(taken)} others")


def sample_objects(rng: np.random.Generator, attempts: int = 10) -> list[SceneObject]:
    """2–3 task objects with distinct named colours in reach, 1–3 distractors with random colours further out. A draw
    whose objects cannot all be placed (about 1 in 8,000 episodes) is drawn again from the same generator, up to
    ``attempts`` times: a scene placed at its first draw is unchanged, and a rare one no longer ends a long generation
    (or a judge's rollouts) with an error."""
    for _ in range(attempts - 1):
        try:
            return _draw_objects(rng)
        except RuntimeError:
            continue
    return _draw_objects(rng)


def _draw_objects(rng: np.random.Generator) -> list[SceneObject]:
    taken: list[tuple[float, float, float]] = []
    objects = []
    n_task = int(rng.integers(2, 4))
    colours = rng.choice(list(COLOURS), size=n_task, replace=False)
    for i, colour in enumerate(colours):
        shape = str(rng.choice(list(SHAPES)))
        geom, size = SHAPES[shape]
        size = tuple(float(s) * rng.uniform(0.9, 1.1) for s in size)
        xy = _place(rng, taken, max(size[:2]) * 1.3, (0.3, -0.2), (0.5, 0.2))
        objects.append(SceneObject(name=f"obj{i}", shape=shape, geom=geom, size=size, rgb=COLOURS[colour], pos=xy,
                                   yaw=float(rng.uniform(-np.pi / 2, np.pi / 2)), colour=str(colour)))
    for i in range(int(rng.integers(1, 4))):
        geom = str(rng.choice(["box", "cylinder"]))
        size = (tuple(rng.uniform([0.02, 0.02, 0.02], [0.05, 0.05, 0.06])) if geom == "box"
                else tuple(rng.uniform([0.02, 0.02], [0.045, 0.07])))
        side = 1 if rng.random() < 0.5 else -1
        y_lo, y_hi = (0.28, 0.5) if side > 0 else (-0.5, -0.28)
        xy = _place(rng, taken, max(size[:2]) * 1.3, (0.15, y_lo), (0.68, y_hi))
        objects.append(SceneObject(name=f"distractor{i}", shape=geom, geom=geom, size=size,
                                   rgb=tuple(rng.uniform(0.05, 0.95, 3)), pos=xy,
                                   yaw=float(rng.uniform(-np.pi, np.pi)), mass=0.15))
    return objects


LAYOUT_SEED = 4242  # the fixed layouts of the LIBERO-like policy benchmark (the same for every dataset seed)


def fixed_layout(layout: int, jitter: float, rng: np.random.Generator) -> tuple[list[SceneObject], Appearance]:
    """Layout number ``layout`` of the LIBERO-like mode (``EpisodePhysics(layouts=K)``): one named task object (the
    first of :func:`sample_objects`'s), its distractors and a look, all drawn from ``SeedSequence([LAYOUT_SEED,
    layout])``; the task object's (x, y) then moves by uniform ±``jitter`` metres drawn from ``rng`` (the episode's
    initial-state variation, as LIBERO's init states)."""
    if jitter < 0:
        raise ValueError(f"jitter: got {jitter}; expected >= 0 (metres)")
    lrng = np.random.default_rng(np.random.SeedSequence([LAYOUT_SEED, int(layout)]))
    objects = sample_objects(lrng)
    look = sample_appearance(lrng)
    task = next(o for o in objects if o.colour)
    dx, dy = rng.uniform(-jitter, jitter), rng.uniform(-jitter, jitter)
    task = replace(task, pos=(task.pos[0] + float(dx), task.pos[1] + float(dy)))
    return [task] + [o for o in objects if not o.colour], look


def sample_appearance(rng: np.random.Generator) -> Appearance:
    """Dim headlight + 1–2 tinted spot lights with shadows, random skybox gradient."""
    lights = []
    for _ in range(int(rng.integers(1, 3))):
        pos = np.array([rng.uniform(-0.2, 0.9), rng.uniform(-0.9, 0.9), rng.uniform(1.2, 2.2)])
        aim = np.array([0.35, 0.0, 0.0]) + rng.normal(0, 0.1, 3)
        tint = rng.uniform(0.75, 1.0, 3)
        lights.append({"pos": pos, "dir": aim - pos, "rgb": tint * rng.uniform(0.5, 0.85)})
    return Appearance(headlight=float(rng.uniform(0.2, 0.35)), lights=lights,
                      skybox=(tuple(rng.uniform(0.3, 0.9, 3)), tuple(rng.uniform(0.05, 0.4, 3))))
