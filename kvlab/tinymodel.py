"""kvlab's tiny local Llama (byte-level BPE tokenizer + seeded random bf16 weights), made without torch or downloads."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from kvlab.paths import MODELS_DIR, publish_dir, temp_prefix

DEFAULT_PATH = MODELS_DIR / "tiny-llama"
STAMP_FILE = "kvlab_tiny_model.json"

#: Everything that decides the model's bytes. Change a value (or GENERATOR_VERSION) and
#: ensure_tiny_model() regenerates instead of reusing the folder on disk.
GENERATOR_VERSION = 3
SEED = 20260701
TARGET_VOCAB = 512
HIDDEN = 256
HEADS = 2  # head_dim 128: sglang-jax pads head_dim to a multiple of 128; vLLM CPU rejects 16
KV_HEADS = 1
LAYERS = 2
INTERMEDIATE = 512
# 200K scaled by 64 is 3,200 tokens (by 32, 6,400); 16K leaves room for prompt + output at any scaled context.
MAX_POSITIONS = 16384
ROPE_THETA = 10000.0
INIT_STD = 0.02

SPECIALS = ("<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "the a of and to in is that it for on with as was at by be this from or an are not have "
    "cache token model server memory context length batch decode prefill attention layer head "
    "tensor parallel engine request stream latency throughput prompt output key value block page "
    "long short fast slow first last time second minute hour number count rate ratio size limit "
    "read write send receive start stop wait ready health metric report table figure study run "
    "retry failure success error warning note result measure model physical roofline bandwidth "
    "compute bound kernel graph eager compile schedule preempt evict hit miss prefix shared radix "
    "question answer document paragraph sentence word letter river mountain city garden window "
    "morning evening north south east west green blue red small large quiet bright simple careful"
).split()


def _corpus() -> str:
    """A fixed pseudo-English text: the same words in the same seeded order on every machine."""
    rng = np.random.default_rng(SEED)
    lines = []
    for i in range(600):
        n = int(rng.integers(6, 18))
        words = [_WORDS[int(j)] for j in rng.integers(0, len(_WORDS), n)]
        # Digits and punctuation so numbers and code-like prompts tokenize into merges too.
        lines.append(f"{' '.join(words).capitalize()}, {i * 37 % 1000} tokens; ratio {i % 10}.{i % 7}!")
    return "\n".join(lines)


def _tokenizer_json() -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB,
        min_frequency=1,
        special_tokens=list(SPECIALS),
        # Only the bytes the (ASCII) corpus uses: every token then decodes to whole characters, so a
        # streamed chunk is never empty for want of the rest of a multi-byte UTF-8 sequence.
        initial_alphabet=[],
        show_progress=False,
    )
    tok.train_from_iterator(_corpus().splitlines(), trainer=trainer)
    bos = tok.token_to_id(SPECIALS[0])
    # Text prompts get a BOS like Llama's; kvlab's token-ID prompts bypass this.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIALS[0]} $A", pair=f"{SPECIALS[0]} $A {SPECIALS[0]} $B", special_tokens=[(SPECIALS[0], bos)]
    )
    # Round-trip through JSON with sorted keys so the file's bytes never depend on map order.
    return json.dumps(json.loads(tok.to_str()), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _bf16_bytes(x: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes (round to nearest even), since numpy has no bf16 dtype."""
    bits = np.ascontiguousarray(x, dtype="<f4").view("<u4")
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


def _shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, in the order the weights are drawn."""
    head_dim = HIDDEN // HEADS
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (HEADS * head_dim, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * head_dim),
            p + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
        }
    return shapes | {"model.norm.weight": (HIDDEN,), "lm_head.weight": (vocab, HIDDEN)}


def _weights(vocab: int) -> dict[str, tuple[tuple[int, ...], bytes]]:
    rng = np.random.default_rng(SEED)
    out = {}
    for name, shape in _shapes(vocab).items():  # insertion order fixes the RNG stream
        if name.endswith("norm.weight"):
            arr = np.ones(shape, dtype=np.float32)
        else:
            arr = rng.normal(0.0, INIT_STD, size=shape).astype(np.float32)
        out[name] = (shape, _bf16_bytes(arr))
    return out


def _safetensors(tensors: dict[str, tuple[tuple[int, ...], bytes]]) -> bytes:
    """Serialise the safetensors format by hand: bf16 without torch, bytes fixed by sorted names."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name in sorted(tensors):
        shape, data = tensors[name]
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def _dump(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def build_files() -> dict[str, bytes]:
    """Every file of the tiny model, as bytes (deterministic: the same on every call)."""
    tok_json = _tokenizer_json()
    vocab = len(json.loads(tok_json)["model"]["vocab"])
    ids = {t["content"]: t["id"] for t in json.loads(tok_json)["added_tokens"]}
    bos, eos, pad = (ids[s] for s in SPECIALS)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rope_theta": ROPE_THETA,
        "rms_norm_eps": 1e-5,
        "initializer_range": INIT_STD,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[0],
        "eos_token": SPECIALS[1],
        "pad_token": SPECIALS[2],
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    generation = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}
    return {
        "config.json": _dump(config),
        "generation_config.json": _dump(generation),
        "tokenizer.json": tok_json.encode(),
        "tokenizer_config.json": _dump(tok_config),
        "special_tokens_map.json": _dump(
            {"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[2]}
        ),
        "model.safetensors": _safetensors(_weights(vocab)),
    }


def parameter_count() -> int:
    """How many parameters the tiny model has (from its recipe; nothing is generated)."""
    vocab = len(json.loads(_tokenizer_json())["model"]["vocab"])
    return sum(int(np.prod(shape)) for shape in _shapes(vocab).values())


def describe(model: str) -> str:
    """A model as a reader understands it: kvlab's tiny model in words (the provenance panel's 'model' row), any
    other model by its name as given."""
    if Path(str(model)).name != DEFAULT_PATH.name:
        return str(model)
    return (
        f"kvlab's tiny Llama ({DEFAULT_PATH.name}): {LAYERS} layers, {parameter_count() / 1e6:.1f}M parameters, "
        "random weights, made locally"
    )


def recipe_hash() -> str:
    """Hash of the parameters that decide the model (what the stamp file records)."""
    recipe = dict(
        v=GENERATOR_VERSION,
        seed=SEED,
        vocab=TARGET_VOCAB,
        hidden=HIDDEN,
        heads=HEADS,
        kv=KV_HEADS,
        layers=LAYERS,
        inter=INTERMEDIATE,
        pos=MAX_POSITIONS,
        theta=ROPE_THETA,
        std=INIT_STD,
        specials=SPECIALS,
        chat=CHAT_TEMPLATE,
        words=_WORDS,
    )
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _is_current(path: Path) -> bool:
    try:
        stamp = json.loads((path / STAMP_FILE).read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("recipe") != recipe_hash() or not stamp.get("files"):
        return False
    return all((path / n).is_file() and _sha256(path / n) == h for n, h in stamp["files"].items())


def ensure_tiny_model(path: str | Path | None = None) -> Path:
    """Make the tiny model at ``path`` (default ``data/models/tiny-llama``) unless it is already there.

    The folder is reused when its stamp records the current recipe and every file still has
    the recorded sha256; otherwise it is regenerated and swapped in by one rename.
    """
    path = Path(path) if path is not None else DEFAULT_PATH
    if _is_current(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _building(path):
        if not _is_current(path):  # another process may have made it while this one waited
            _build(path)
    return path


@contextlib.contextmanager
def _building(path: Path):
    """Hold the lock that makes one process at a time build the model at ``path``: without it, processes that
    start together (make test's three pytest streams on a fresh clone) each replaced the folder, and one of them
    found it gone for the moment between two renames (CI, 2026-12-07: `local model folder does not exist`)."""
    lock = path.parent / f"{temp_prefix(path.name)}lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _build(path: Path) -> None:
    files = build_files()
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=temp_prefix(path.name)))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the engine may run as another user
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        stamp = {"recipe": recipe_hash(), "files": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}}
        (tmp / STAMP_FILE).write_bytes(_dump(stamp))
        publish_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def vocab_size(path: str | Path | None = None) -> int:
    """The vocabulary size of the tiny model at ``path`` (generated if missing): token IDs must be below it."""
    path = ensure_tiny_model(path)
    return int(json.loads((path / "config.json").read_text())["vocab_size"])
