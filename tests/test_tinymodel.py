"""The tiny model is deterministic, loadable and reused when unchanged."""

from __future__ import annotations

import hashlib
import json
import struct

from kvlab import tinymodel


def _hashes(path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_same_bytes_every_time(tmp_path):
    a = tinymodel.ensure_tiny_model(tmp_path / "a")
    b = tinymodel.ensure_tiny_model(tmp_path / "b")
    assert _hashes(a) == _hashes(b)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= set(_hashes(a))


def test_idempotent_and_repairs(tmp_path):
    path = tinymodel.ensure_tiny_model(tmp_path / "m")
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert tinymodel.ensure_tiny_model(path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rewritten
    (path / "config.json").write_text("{}")
    tinymodel.ensure_tiny_model(path)
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"


def test_config_matches_tokenizer_and_weights(tmp_path):
    path = tinymodel.ensure_tiny_model(tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    tok = json.loads((path / "tokenizer.json").read_text())
    vocab = tinymodel.vocab_size(path)
    assert vocab == cfg["vocab_size"] == len(tok["model"]["vocab"]) == 512
    # head_dim 128: vLLM's CPU attention rejects 16, sglang-jax pads to a multiple of 128 (no padding at 128)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == cfg["head_dim"] == 128
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]) == (2, 1, 2)
    # KV bytes per token: layers x (K, V) x KV heads x head_dim x bf16 = 1,024 in both engines
    assert 2 * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2 == 1024
    assert cfg["max_position_embeddings"] >= 6400 + 64
    raw = (path / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert header["model.embed_tokens.weight"] == {
        "dtype": "BF16",
        "shape": [vocab, 256],
        "data_offsets": header["model.embed_tokens.weight"]["data_offsets"],
    }
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert len(raw) == 8 + n + end
    tc = json.loads((path / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["chat_template"]


def test_bf16_rounding():
    import numpy as np

    x = np.array([1.0, -2.5, 0.1], dtype=np.float32)
    got = np.frombuffer(tinymodel._bf16_bytes(x), dtype="<u2").astype(np.uint32) << 16
    back = got.view(np.float32)
    assert back[0] == 1.0 and back[1] == -2.5 and abs(back[2] - 0.1) < 1e-3


def test_every_ordinary_token_decodes_to_whole_text():
    """Streamed chunks are never empty for want of half a UTF-8 character (TTFT counts text-bearing chunks)."""
    import json

    from tokenizers import Tokenizer

    from kvlab import tinymodel

    files = tinymodel.build_files()
    raw = files["tokenizer.json"]
    tok = Tokenizer.from_str(raw.decode() if isinstance(raw, bytes) else raw)
    specials = set(json.loads(raw)["added_tokens"][i]["id"] for i in range(len(tinymodel.SPECIALS)))
    for i in range(tok.get_vocab_size()):
        if i in specials:
            continue
        text = tok.decode([i])
        assert text and "\ufffd" not in text, (i, text)


def test_the_model_is_described_in_words_with_its_real_parameter_count(tiny_model):
    """The provenance panel names kvlab's tiny model in words; its parameter count is the weights file's own."""
    import json
    import math
    import struct

    from kvlab import tinymodel

    raw = (tiny_model / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    stored = sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    assert tinymodel.parameter_count() == stored == 1_443_072
    assert (
        tinymodel.describe(str(tiny_model))
        == tinymodel.describe("tiny-llama")
        == ("kvlab's tiny Llama (tiny-llama): 2 layers, 1.4M parameters, random weights, made locally")
    )
    assert tinymodel.describe("moonshotai/Kimi-K3") == "moonshotai/Kimi-K3"


def _ensure_and_stat(path, start):
    start.wait()
    out = tinymodel.ensure_tiny_model(path)
    return out.stat().st_ino


def test_processes_that_start_together_build_it_once_and_never_replace_it(tmp_path):
    """make test's three pytest streams each ensure the model on a fresh clone: one builds it and the others wait
    and reuse it, so none finds the folder gone between two renames (CI, 2026-12-07). Every caller gets the same
    folder (one inode), and no temporary folder is left beside it."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    path = tmp_path / "m"
    with ctx.Manager() as manager:
        start = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            inodes = pool.starmap(_ensure_and_stat, [(path, start)] * 4)
    assert len(set(inodes)) == 1 and inodes[0] == path.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kvlab-tmp.m.lock", "m"]
