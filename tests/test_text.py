"""The text encoder (seeded demo T5, local (u)T5 folders) and the instruction-embedding cache."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from simforcing.config import ConfigError, load_config
from simforcing.data.format import EpisodeInfo, write_meta
from simforcing.data.text_cache import cache_dir, embedding_path, load_embedding, read_cache_info
from simforcing.models import text as text_module
from simforcing.models.text import demo_text_encoder, load_text_encoder, pretrained_text_encoder, prompt_clean
from simforcing.prep.text import embed_dataset

LONG = "push the red block to the left of the blue bowl, then lift it"


@pytest.fixture(scope="module")
def demo_encoder():
    return demo_text_encoder(dim=64, max_tokens=16)


def test_demo_encoder_shapes(demo_encoder):
    embs = demo_encoder.encode(["lift", LONG, ""])
    assert [tuple(e.shape) for e in embs] == [(5, 64), (16, 64), (1, 64)]  # bytes + EOS, capped at 16
    assert all(e.dtype == torch.float32 and torch.isfinite(e).all() for e in embs)
    assert demo_encoder.dim == 64 and "seed" in demo_encoder.name
    # the encoder reads the whole instruction: two texts sharing their first 16 bytes still differ
    a, b = demo_encoder.encode([LONG, LONG[:20] + " gently"])
    assert a.shape == b.shape and not torch.allclose(a, b)
    # padding in a batch does not change an embedding
    torch.testing.assert_close(demo_encoder.encode(["lift"])[0], embs[0], atol=1e-5, rtol=1e-5)


def test_demo_encoder_deterministic_and_rng_neutral(demo_encoder):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    other = demo_text_encoder(dim=64, max_tokens=16)
    assert torch.equal(torch.rand(3), expected)  # building it does not touch the global RNG
    assert torch.equal(other.encode([LONG])[0], demo_encoder.encode([LONG])[0])
    code = ("import torch, sys; from simforcing.models.text import demo_text_encoder; "
            f"e = demo_text_encoder(64, 16).encode([{LONG!r}])[0]; sys.stdout.write(repr(e.double().sum().item()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(out) == demo_encoder.encode([LONG])[0].double().sum().item()  # same across processes


def _tiny_folder(path, model_type: str):
    from transformers import ByT5Tokenizer, T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    tok = ByT5Tokenizer()
    kw = dict(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)
    torch.manual_seed(0)
    model = UMT5EncoderModel(UMT5Config(**kw)) if model_type == "umt5" else T5EncoderModel(T5Config(**kw))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model.eval(), tok


@pytest.mark.parametrize("model_type", ["umt5", "t5"])
def test_pretrained_encoder_matches_transformers(tmp_path, model_type):
    model, tok = _tiny_folder(tmp_path / "enc", model_type)
    enc = pretrained_text_encoder(tmp_path / "enc", max_tokens=8)
    assert enc.dim == 32 and enc.name.startswith(model_type)
    texts = ["pick", "pick up the cube"]
    embs = enc.encode(texts)
    with torch.no_grad():
        for text, emb in zip(texts, embs):
            ids = tok([text], return_tensors="pt")["input_ids"]
            ref = model(input_ids=ids).last_hidden_state[0]
            n = min(ids.shape[1], 8)
            assert emb.shape == (n, 32)
            torch.testing.assert_close(emb, ref[:n], atol=1e-5, rtol=1e-4)


def test_prompts_are_cleaned_as_wan_does_before_tokenising(monkeypatch):
    """HTML entities unescaped twice and whitespace collapsed before tokenising (Wan2.2 / diffusers' prompt_clean):
    a prompt that needs it gets the tokens and the embedding of its clean form."""
    messy = "  pick up the cube &amp;amp; put\tit  in   the bowl\n"
    clean = "pick up the cube & put it in the bowl"
    assert prompt_clean(messy) == clean and prompt_clean(clean) == clean
    enc = demo_text_encoder(dim=64, max_tokens=64)
    raw = enc.tokenizer([messy])["input_ids"][0]  # byte-level: one token per byte + EOS
    got, ref = enc.encode([messy]), enc.encode([clean])
    assert got[0].shape[0] == len(clean) + 1 < len(raw)
    assert torch.equal(got[0], ref[0])
    # ftfy runs first when it is installed (an optional extra)
    fake_ftfy = type("Ftfy", (), {"fix_text": staticmethod(lambda t: t.replace("â€™", "’"))})
    monkeypatch.setattr(text_module, "ftfy", fake_ftfy)
    assert prompt_clean("donâ€™t  push") == "don’t push"


def test_pipeline_layout_and_errors(tmp_path):
    _tiny_folder(tmp_path / "pipe" / "text_encoder", "umt5")
    (tmp_path / "pipe" / "tokenizer").mkdir()
    for f in ("tokenizer_config.json", "added_tokens.json"):  # a diffusers pipeline keeps the tokenizer apart
        (tmp_path / "pipe" / "text_encoder" / f).rename(tmp_path / "pipe" / "tokenizer" / f)
    cfg = load_config("bridge", [f"--model.text_encoder={tmp_path / 'pipe'}", "--model.text_dim=32"])
    enc = load_text_encoder(cfg)
    assert enc.encode(["x"])[0].shape == (2, 32)
    cfg.model.text_dim = 4096
    with pytest.raises(ConfigError, match="model.text_dim"):
        load_text_encoder(cfg)
    with pytest.raises(ConfigError, match="model.text_encoder"):
        load_text_encoder(load_config("bridge"))
    with pytest.raises(ConfigError, match="model.text_encoder"):
        load_text_encoder(load_config("interndata_a1", [f"--model.text_encoder={tmp_path / 'none'}"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="model.text_encoder"):
        load_text_encoder(load_config("bridge", [f"--model.text_encoder={tmp_path / 'empty'}"]))


def _meta_only_dataset(root, instructions):
    eps = [EpisodeInfo(f"ep{i}", 9, text) for i, text in enumerate(instructions)]
    write_meta(root, {"fps": 10, "height": 32, "width": 48}, eps, {"train": [e.episode_id for e in eps]})


def test_embed_dataset_fills_and_reuses_cache(tmp_path, demo_encoder):
    root = tmp_path / "ds"
    _meta_only_dataset(root, ["lift the cube", "push the cube", "lift the cube", LONG])
    cfg = load_config("demo")
    assert embed_dataset(root, cfg, demo_encoder) == 3  # distinct instructions
    cache = cache_dir(root)
    assert read_cache_info(cache) == {"encoder": demo_encoder.name, "text_dim": 64, "max_tokens": 16}
    text, mask = load_embedding(cache, LONG, 16, 64)
    assert mask.all() and torch.equal(torch.from_numpy(text), demo_encoder.encode([LONG])[0])
    assert embed_dataset(root, cfg, demo_encoder) == 0  # all present
    embedding_path(cache, "push the cube").unlink()
    assert embed_dataset(root, cfg, demo_encoder) == 1  # only the missing one
    other = demo_text_encoder(dim=32, max_tokens=16)
    stale = embedding_path(cache, "lift the cube").stat().st_mtime_ns
    _meta_only_dataset(root, ["lift the cube"])
    assert embed_dataset(root, cfg, other) == 1  # another encoder: everything recomputed, stale files removed
    assert read_cache_info(cache)["text_dim"] == 32
    assert sorted(p.name for p in cache.glob("*.safetensors")) == [embedding_path(cache, "lift the cube").name]
    assert embedding_path(cache, "lift the cube").stat().st_mtime_ns != stale


def test_embed_text_command(tmp_path, capsys):
    from simforcing.cli import main

    root = tmp_path / "ds"
    _meta_only_dataset(root, ["lift the cube", "push the cube"])
    assert main(["data", "embed-text", str(root)]) == 0
    assert "embedded 2 instruction(s)" in capsys.readouterr().out
    assert read_cache_info(cache_dir(root))["text_dim"] == load_config("demo").model.text_dim
    assert main(["data", "embed-text", str(tmp_path / "missing")]) == 1
    assert "episode index is missing" in capsys.readouterr().err
