"""The frozen text encoder (the instruction-embedding cache is filled by ``simforcing.prep.text``).

    enc = load_text_encoder(cfg)                 # umT5 from cfg.model.text_encoder, or the seeded demo T5
    embs = enc.encode(["push the red block"])   # [Tensor (n_i, D)]: real tokens only, n_i <= cfg.data.text_max_tokens

Prompts are cleaned before tokenising as Wan2.2 and diffusers' Wan pipelines do (:func:`prompt_clean`): ftfy's
``fix_text`` when ftfy is installed (an optional extra, not a dependency), HTML entities unescaped twice, runs of
whitespace collapsed to one space, ends stripped — so ``"pick  the cube &amp; place it "`` and
``"pick the cube & place it"`` give the same tokens and the same embedding.

The encoder reads up to ``CONTEXT_TOKENS`` tokens (Wan2.2's text length) and keeps the first ``text_max_tokens``
output states, so every kept state is contextualised by the whole instruction.
Real: Wan2.2 conditions on umT5-XXL (D = 4096); loaded with transformers (``UMT5EncoderModel`` or
``T5EncoderModel``, by its config) from a LOCAL folder: a text-encoder folder with its tokenizer, or a diffusers
pipeline folder with ``text_encoder/`` and ``tokenizer/``.
Demo: no umT5 weights; a small T5 encoder initialised from a fixed seed with the byte-level ``ByT5Tokenizer``.
"""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path

import torch
from torch import nn

from simforcing.config import Config, ConfigError

try:  # optional: what Wan2.2 and diffusers run first when it is installed; without it the rest of the cleaning runs
    import ftfy
except ImportError:
    ftfy = None

log = logging.getLogger(__name__)

CONTEXT_TOKENS = 512  # tokens the encoder reads (Wan2.2 text_len); outputs are cut to cfg.data.text_max_tokens
DEMO_SEED = 1234
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "spiece.model")


def prompt_clean(text: str) -> str:
    """A prompt as Wan2.2 / diffusers tokenise it: ftfy.fix_text (when installed), HTML unescaped twice (``&amp;amp;``
    -> ``&``), every run of whitespace one space, no leading/trailing whitespace."""
    if ftfy is not None:
        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


class TextEncoder:
    """Frozen (u)T5 encoder + tokenizer: ``encode(texts) -> [float32 (n_i, D)]`` with n_i <= ``max_tokens``."""

    def __init__(self, model: nn.Module, tokenizer, name: str, max_tokens: int,
                 device: str | torch.device = "cpu"):
        self.model = model.to(device).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self.dim = int(model.config.d_model)
        self.max_tokens = int(max_tokens)
        self.device = torch.device(device)

    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 16) -> list[torch.Tensor]:
        """One (n_i, D) float32 CPU tensor per text (cleaned by :func:`prompt_clean` first): the real tokens (EOS
        included), at most ``max_tokens``."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, got a single str")
        texts = [prompt_clean(t) for t in texts]
        out: list[torch.Tensor] = []
        for i in range(0, len(texts), batch_size):
            tok = self.tokenizer(texts[i:i + batch_size], padding=True, truncation=True,
                                 max_length=CONTEXT_TOKENS, return_tensors="pt")
            ids = tok["input_ids"].to(self.device)  # (b, n)
            mask = tok["attention_mask"].to(self.device)  # (b, n)
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state.float()  # (b, n, D)
            for h, m in zip(hidden, mask):
                n = min(int(m.sum()), self.max_tokens)
                out.append(h[:n].cpu().contiguous())
        return out


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------


def demo_text_encoder(dim: int, max_tokens: int, seed: int = DEMO_SEED,
                      device: str | torch.device = "cpu") -> TextEncoder:
    """A 2-layer T5 encoder of width ``dim`` with weights drawn from ``seed`` (same text -> same embedding)."""
    from transformers import ByT5Tokenizer, T5Config, T5EncoderModel  # transformers: only where an encoder is built

    tokenizer = ByT5Tokenizer()
    heads = 4 if dim % 4 == 0 else 1
    config = T5Config(vocab_size=len(tokenizer), d_model=dim, d_kv=dim // heads, d_ff=2 * dim, num_layers=2,
                      num_heads=heads, dropout_rate=0.0, feed_forward_proj="relu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = T5EncoderModel(config)
    log.warning("demo text encoder: seeded random T5, not umT5 (d_model %d, seed %d)", dim, seed)
    return TextEncoder(model, tokenizer, f"demo-seeded-t5(seed={seed},dim={dim})", max_tokens, device)


def _resolve_folders(path: Path) -> tuple[Path, Path]:
    """(model folder, tokenizer folder) for a text-encoder folder or a diffusers pipeline folder."""
    model_dir = path / "text_encoder" if (path / "text_encoder" / "config.json").is_file() else path
    candidates = [model_dir, path / "tokenizer", model_dir.parent / "tokenizer"]
    for c in candidates:
        if any((c / f).is_file() for f in TOKENIZER_FILES):
            return model_dir, c
    raise ConfigError(f"model.text_encoder: no tokenizer found in {', '.join(map(str, candidates))}; expected one "
                      f"of {', '.join(TOKENIZER_FILES)}")


def _load_tokenizer(tok_dir: Path):
    """AutoTokenizer; else the class named by tokenizer_config.json (transformers 5 maps model_type umt5 to a
    tokenizer.json backend even when the folder declares e.g. a slow ByT5Tokenizer)."""
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    except (OSError, ValueError):
        p = tok_dir / "tokenizer_config.json"
        declared = json.loads(p.read_text()).get("tokenizer_class") if p.is_file() else None
        cls = getattr(transformers, declared, None) if isinstance(declared, str) else None
        if cls is None:
            raise
        return cls.from_pretrained(str(tok_dir), local_files_only=True)


def pretrained_text_encoder(path: str | Path, max_tokens: int, device: str | torch.device = "cpu",
                            dtype: torch.dtype | None = None) -> TextEncoder:
    """umT5 / T5 encoder from a local folder (never downloads). ``dtype``: default bf16 on CUDA, else fp32."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"model.text_encoder: {path} is not a folder; expected a local umT5 encoder "
                          f"(transformers) or a diffusers Wan2.2 pipeline folder")
    model_dir, tok_dir = _resolve_folders(path)
    if dtype is None:
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    from transformers import AutoConfig, T5EncoderModel, UMT5EncoderModel

    try:
        config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
        classes = {"umt5": UMT5EncoderModel, "t5": T5EncoderModel}
        if config.model_type not in classes:
            raise ConfigError(f"model.text_encoder: {model_dir / 'config.json'} has model_type "
                              f"{config.model_type!r}; expected 'umt5' or 't5'")
        model = classes[config.model_type].from_pretrained(str(model_dir), local_files_only=True, dtype=dtype,
                                                               use_safetensors=True)
        tokenizer = _load_tokenizer(tok_dir)
    except (OSError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"model.text_encoder: cannot load a (u)T5 encoder from {model_dir} "
                          f"({type(e).__name__}: {e})") from e
    return TextEncoder(model, tokenizer, f"{config.model_type}:{model_dir.resolve()}", max_tokens, device)


def load_text_encoder(cfg: Config, device: str | torch.device = "cpu") -> TextEncoder:
    """``cfg.model.text_encoder`` (a local folder), or the seeded demo T5 when it is None and the preset is demo."""
    path = cfg.model.text_encoder
    if path is None:
        if cfg.preset != "demo":
            raise ConfigError(f"model.text_encoder: not set; the {cfg.preset} preset needs a local umT5-XXL "
                              f"encoder folder (transformers UMT5EncoderModel + tokenizer), e.g. "
                              f"--model.text_encoder=/path/Wan2.2-TI2V-5B-Diffusers")
        enc = demo_text_encoder(cfg.model.text_dim, cfg.data.text_max_tokens, device=device)
    else:
        enc = pretrained_text_encoder(path, cfg.data.text_max_tokens, device)
    if enc.dim != cfg.model.text_dim:
        raise ConfigError(f"model.text_dim: the config says {cfg.model.text_dim} but the text encoder {enc.name} "
                          f"has d_model {enc.dim}; set --model.text_dim={enc.dim}")
    return enc
