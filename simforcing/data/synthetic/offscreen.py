"""Offscreen renderers that share one OpenGL context per process.

``mujoco.Renderer`` creates an OpenGL context of its own, and the first ``MjrContext`` made in a fresh context costs
about 130 ms on a software rasteriser (Mesa llvmpipe, what a machine without a GPU renders with: its shaders are
compiled per context), where one more in a context that already made one costs 6–15 ms. The benchmark builds a
renderer per episode (every episode is its own model: scene, textures, camera), so the judge's 600 rollouts, the
simulator pools and every policy evaluation paid that compile again and again — more than the rendering of a short
episode itself. :class:`SharedContextRenderer` is ``mujoco.Renderer`` on the one context of its process (made on
first use, kept until the process ends), with a scene sized for the model (``mujoco.Renderer`` allocates room for
10,000 geoms, 20 ms per renderer); its pixels are ``mujoco.Renderer``'s, bit for bit (``tests/test_synthetic.py``).

Not thread-safe (one OpenGL context is current per thread): the benchmark renders from one thread per process, and
its parallel workers are spawned processes, each with its own context.

llvmpipe rasterises on worker threads of its own (one per core) and hands every frame to them and back; for the
benchmark's frames (32×48) the hand-over costs more than the drawing. So the shared context, when it is made, asks Mesa
for none (``LP_NUM_THREADS=0``: the calling thread draws) unless the environment already sets it: a twin frame 1.19 →
0.84 ms, a real frame as before (quiet Xeon, one thread), the pixels the same bit for bit (docs/notebook/benchmark.md,
"The servo loop in C"). Only a process that renders the benchmark sets it (importing this module does not: a LIBERO
evaluation's renderer keeps Mesa's default); Mesa reads it once, when the process's first EGL display is made. Set
``LP_NUM_THREADS`` yourself for large frames on many cores.
"""

from __future__ import annotations

import atexit
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402  (after MUJOCO_GL is set)
from mujoco import gl_context  # noqa: E402

_CONTEXT = None  # the process's OpenGL context (None until the first renderer, or where MuJoCo has no GL backend)
_CONTEXT_SIZE = (640, 480)  # what an OSMesa context allocates; the benchmark's models' offscreen buffers are this size
_EXITING = False  # set at exit, before MuJoCo's EGL display is terminated: renderers collected then free nothing


def _at_exit() -> None:
    global _EXITING
    _EXITING = True


def shared_context():
    """The process's OpenGL context, made current (created on first use; None without a GL backend)."""
    global _CONTEXT
    if _CONTEXT is None and gl_context.GLContext is not None:
        os.environ.setdefault("LP_NUM_THREADS", "0")  # llvmpipe draws on the calling thread (module docstring)
        _CONTEXT = gl_context.GLContext(*_CONTEXT_SIZE)
        atexit.register(_at_exit)  # after the backend's own exit handler, so it runs before it
    if _CONTEXT is not None:
        _CONTEXT.make_current()
    return _CONTEXT


def scene_capacity(model) -> int:
    """Geoms the scene holds: every model geom, its site and tendon decorations, with a margin (``mujoco.Renderer``'s
    default of 10,000 costs 20 ms to allocate per renderer)."""
    return max(1000, 4 * (model.ngeom + model.nsite + model.ntendon))


class SharedContextRenderer(mujoco.Renderer):
    """``mujoco.Renderer`` (same ``update_scene`` / ``render`` / segmentation) on the process's shared context."""

    def __init__(self, model, height: int, width: int):
        # what mujoco.Renderer.__init__ sets up, but the context is the shared one (module docstring)
        self._gl_context = None
        self._mjr_context = None
        buffer_w, buffer_h = model.vis.global_.offwidth, model.vis.global_.offheight
        if width > buffer_w or height > buffer_h:
            raise ValueError(f"renderer: {width}x{height} exceeds the model's offscreen buffer {buffer_w}x{buffer_h}; "
                             "raise <visual><global offwidth=... offheight=.../> in the model's XML")
        self._width, self._height, self._model = width, height, model
        self._scene = mujoco.MjvScene(model=model, maxgeom=scene_capacity(model))
        self._scene_option = mujoco.MjvOption()
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._gl_context = shared_context()
        self._mjr_context = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._mjr_context)
        self._mjr_context.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR
        self._depth_rendering = False
        self._segmentation_rendering = False

    def render(self, *, out=None):
        if self._gl_context is not None:
            self._gl_context.make_current()  # another renderer of the process may have bound its buffer
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._mjr_context)
        return super().render(out=out)

    def close(self) -> None:
        """Frees this renderer's MuJoCo context; the shared OpenGL context stays for the process's next renderer."""
        if self._mjr_context is not None and not _EXITING:
            if self._gl_context is not None:
                self._gl_context.make_current()
            self._mjr_context.free()
        self._mjr_context = None
        self._gl_context = None
