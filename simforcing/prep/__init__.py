"""Dataset preparation: the steps that run a frozen model over a dataset and write what training reads.

- ``prep.text``: instruction embeddings into the dataset's text cache (`simforcing data embed-text`), and the
  finishing step of a generated dataset (statistics + embeddings).
- ``prep.latents``: windows encoded by the frozen VAE into a latent cache (`simforcing data encode`).
- ``prep.demo_vae``: the demo VAE fitted in closed form on a dataset's frames (`simforcing model fit-vae`).

``prep`` depends on ``data`` (formats, datasets) and ``models`` (encoders); ``data`` and ``models`` never import each
other, nor ``prep``.
"""
