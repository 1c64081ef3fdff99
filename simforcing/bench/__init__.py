"""The benchmark (`simforcing bench`): sampler latency against the ideal work, training-step cost, data throughput,
scaling.

    simforcing bench [--preset demo] [--quick] --out FILE.json      (+ FILE.md tables, FILE_scaling.png)
    simforcing bench --gpu [--preset bridge] [--peak-tflops X] --out FILE.json      (+ FILE.md; see ``gpu``)

Models are built from the preset with random weights (``build_world_model``; the zero-initialised output head and
condition projections P_j get small random values so that every branch changes the output); no checkpoint and no
dataset are needed. Sections (``--sections``, all by default):

1. ``sampler`` — for each (N_s, N_r, w): latency per sample (SPEC §8: first-frame encode + simulation + real rollout
   + decode; one warm-up call excluded, median of 5–25 repeats — a cheap configuration repeats until its repetitions
   span 3 s —, wall clock around the whole call), the per-sample
   network evaluations it ran (``forwards``) and the minimal ones (w = 0: N_r; w = 1: N_s + N_r; else N_s + 2·N_r),
   the median time of one single-sample forward (timed right before and after each call of that configuration),
   and ``ratio = latency / (minimal × forward + decode)``. The forward is a plain ``model(...)`` call; the sampler's
   steps are cheaper (the step context computes the text/action work once per batch, ``WorldModel.step_context``;
   its cost and a step's cost are reported as ``step_context_s`` and ``forward_step_s``), and a batched pair forward
   of 2 samples may cost less than 2 single forwards, so the ratio can be < 1. Beside it the same
   configuration through :func:`reference_sample`, a plain loop as the authors' code runs it (simulation rollout
   always, both CFG branches as two sequential forwards, P_j(c) recomputed in every forward), its latency, the
   speed-up of ours, and the largest pixel difference between the two outputs (same noise: they must agree). The
   time spent inside network calls (forward hooks) splits our latency into network work and everything else.
2. ``train`` — median time of one training step (step function + backward; and with the AdamW update) and the peak
   memory of one step for ``sft`` and ``simforcing`` on the same latent batch (teacher in no-grad), their ratio, the
   per-step network evaluations counted with hooks, and the ideal ratio from forward/backward counts (a backward
   costs 2 forwards: SFT 1 + 2 = 3 units, SimForcing 1 teacher + 2 student forwards + 2 student backwards = 7).
3. ``data`` — windows per second through a DataLoader with 0/1/2 workers, from video decoding
   (PairedWindowDataset, a fresh dataset each pass, so every episode is decoded once per pass) and from the latent
   cache (LatentWindowDataset), on a small dataset written to a temporary folder.
4. ``scaling`` — one forward's time, peak memory and FLOPs (``models.info.forward_flops``: joint attention vs. the
   rest) against the number of frames and the resolution at the preset's width; a PNG plot.
5. ``policy`` — latency of one action chunk per policy setting (action_only, unconditional, video_action), the
   network work per chunk counted (observation encodes, action-expert steps, joint forwards), against a plain loop
   that recomputes the observation at every denoising step (``bench/policy.py``).

Opt-in sections (``bench/compile_step.py``): ``compile`` (compiled training steps and sampler calls against eager)
and ``precision`` (the training steps in fp32 against bf16 autocast, 1 and 2 threads); (``bench/simulator.py``)
``simulator`` (the synthetic benchmark's MuJoCo simulator per frame: the servo controller against its stepped loop,
the IK, a real and a twin frame's rendering).

GPU readiness is its own mode, ``simforcing bench --gpu`` (``gpu``): the 5B ``bridge`` preset on one CUDA GPU in bf16
with activation checkpointing — training step (tokens/s, MFU, peak memory), the sampler against the paper's latencies
and FSDP2 on one process; without CUDA a named message and exit code 69.

Clocks: the wall clock (the headline: ``latency_s``, ``ratio``, ``speedup``) and this process's CPU time (``*_cpu``;
with one torch thread the work done, less disturbed by other processes loading the machine, whose load average is
recorded in ``machine``). Ratios and speed-ups are medians over repetitions of per-repetition ratios of calls made
seconds apart (ours and the reference back to back in alternating order, the forward timed right before and after),
so a load that drifts during the run cancels. ``targets`` checks the issue's targets on both clocks.

Peak memory: CUDA ``max_memory_allocated`` above what was allocated before; CPU the peak of live tensor bytes from
the profiler's allocation events (``profile_memory``), the same quantity. ``--quick`` runs a subset; ``--tiny`` (for
the test suite) shrinks every section further. No timing is asserted in tests.

Files, one per section: ``options`` (modes, grids, targets), ``measure`` (clocks, peak memory, machine, bf16 peaks by
device name), ``inputs`` (random-weight models, VAEs and batches), ``sampler``, ``train_step``, ``throughput`` (data),
``scaling``, ``policy``, ``simulator``, ``gpu`` (``bench --gpu``), ``report`` (targets, tables, the JSON of a whole
run).
"""
